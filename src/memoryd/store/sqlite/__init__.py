"""The SQLite backend (store/backend.py): FTS5, sqlite-vec, claims under BEGIN IMMEDIATE."""
