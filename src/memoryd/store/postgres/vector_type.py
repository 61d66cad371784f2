"""The column type of ``memory_vectors.vector``: float32 bytes to memoryd, pgvector on PostgreSQL.

memoryd reads and writes a vector as float32 little-endian bytes on every
backend (store/vectors.py from_blob). On SQLite the column holds those bytes;
on PostgreSQL it is a pgvector ``vector(dim)`` column (migration 0008), and
this type converts at the driver boundary, in pgvector's text form
(``[0.1,0.2,...]``): pgvector prints float4 in shortest round-trip form, so a
vector reads back bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sqlalchemy import LargeBinary
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine, UserDefinedType


class PgVector(UserDefinedType[str]):
    """pgvector's ``vector`` (dimension checked by the column's type modifier in the database)."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "vector"


def to_pg_text(blob: bytes) -> str:
    """float32 little-endian bytes as a pgvector literal."""
    floats = np.frombuffer(blob, dtype="<f4")
    return "[" + ",".join(repr(float(x)) for x in floats) + "]"


def from_pg_text(value: str) -> bytes:
    """A pgvector literal as float32 little-endian bytes."""
    return np.array(value.strip("[]").split(","), dtype="<f4").tobytes()


class VectorBytes(TypeDecorator[bytes]):
    """Bytes in Python; BLOB on SQLite, pgvector ``vector`` on PostgreSQL."""

    impl = LargeBinary
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(PgVector())
        return dialect.type_descriptor(LargeBinary())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None or dialect.name != "postgresql":
            return value
        return to_pg_text(bytes(value))

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if value is None or dialect.name != "postgresql":
            return value
        return from_pg_text(value)
