"""The vector index beside a large store, on either backend: HNSW graphs (graph.py), an owner's
rows split into graphs of bounded size (parts.py), kept in step with the store by a change log that
each backend writes in its own way (source.py; store/sqlite/ann_log.py, store/postgres/ann_log.py),
and the set of graphs that a daemon keeps and searches (index_set.py)."""
