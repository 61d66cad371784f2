"""The durable store: schema, migrations, memories, search, audit (SQLAlchemy Core)."""
