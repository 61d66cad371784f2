"""The PostgreSQL backend (store/backend.py): tsvector + GIN, pgvector HNSW, SKIP LOCKED claims."""
