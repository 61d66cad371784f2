"""The lexical index beside a large store, on either backend: tantivy shards (shard.py) kept in
step with the store by a change log that each backend writes in its own way (changelog.py, logs.py;
store/sqlite/lex_log.py, store/postgres/lex_log.py), and the set of shards that a daemon keeps
and searches (index_set.py)."""
