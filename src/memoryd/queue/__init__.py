"""The durable job queue (a `jobs` table with lease columns)."""
