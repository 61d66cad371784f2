"""An export record's ``vector``: its shape, read the same way by ``memoryd import`` and the daemon.

``memoryd export --with-vectors`` writes each memory's stored embedding as
``{"model", "dim", "encoding": "f32le-base64", "data", "content_hash"}``:
little-endian float32, base64 (2,048 characters for 384 dimensions, against
about 7,600 for the same floats as a JSON list: docs/export-format.md).
``content_hash`` is the hash of the text the vector was made from.

The file is untrusted, so a vector is checked before anything is written: a
known encoding, base64 that decodes, exactly ``dim`` floats, every one
finite. Whether it is *kept* is the daemon's to decide (service/validation.py
``keep_vector``): the record's model and dimension must be its embedder's, and
the content hash, recomputed from the record's content, must equal the one the
vector was made from; any other vector is dropped and the row embedded again.
This module decides only whether the value is well formed; it never raises.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

ENCODING = "f32le-base64"
FIELDS = {"model", "dim", "encoding", "data", "content_hash"}
#: The largest dimension a vector may claim (pgvector's limit for an indexed column is 2,000;
#: this bounds what a hostile ``dim`` can make a reader allocate).
MAX_DIM = 16000
MAX_MODEL_LEN = 256


@dataclass(frozen=True)
class Vector:
    """A well-formed record vector: the model that made it, its dimension, its float32
    little-endian bytes and the content hash it claims to describe (None when the file
    gives none: such a vector is never kept)."""

    model: str
    dim: int
    data: bytes
    content_hash: str | None


@dataclass(frozen=True)
class Problem:
    """Why a vector is malformed: the sub-field at fault (``vector.data``) and what is wrong."""

    field: str
    reason: str


_HEX64 = re.compile(r"[0-9a-f]{64}")


def _is_hex64(value: Any) -> bool:
    # A regex, not a loop over the characters: both ends of an import check every record's.
    return isinstance(value, str) and _HEX64.fullmatch(value) is not None


def decode(value: Any, where: str = "vector") -> Vector | Problem | None:
    """The record's ``vector`` read: None for a null vector, a :class:`Vector` when well
    formed, else the :class:`Problem` naming the sub-field (``where`` prefixes it)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return Problem(where, "must be an object {model, dim, encoding, data, content_hash} or null")
    extra = sorted(set(value) - FIELDS)
    if extra:
        return Problem(f"{where}.{extra[0]}", f"unknown field; expected some of {sorted(FIELDS)}")
    model = value.get("model")
    if not isinstance(model, str) or not model or len(model) > MAX_MODEL_LEN or "\x00" in model:
        return Problem(f"{where}.model", f"must be the embedder's name (1 to {MAX_MODEL_LEN} characters)")
    dim = value.get("dim")
    if isinstance(dim, bool) or not isinstance(dim, int) or not 1 <= dim <= MAX_DIM:
        return Problem(f"{where}.dim", f"must be an integer from 1 to {MAX_DIM}")
    if value.get("encoding") != ENCODING:
        return Problem(f"{where}.encoding", f"must be {ENCODING!r} (little-endian float32, base64)")
    data = value.get("data")
    if not isinstance(data, str):
        return Problem(f"{where}.data", "must be a base64 string")
    if len(data) != 4 * ((dim * 4 + 2) // 3):
        return Problem(f"{where}.data", f"must hold exactly dim ({dim}) float32 values "
                                        f"({dim * 4} bytes, {4 * ((dim * 4 + 2) // 3)} base64 characters)")
    try:
        blob = base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return Problem(f"{where}.data", "is not valid base64")
    if len(blob) != dim * 4:
        return Problem(f"{where}.data", f"must hold exactly dim ({dim}) float32 values ({dim * 4} bytes)")
    if not bool(np.isfinite(np.frombuffer(blob, dtype="<f4")).all()):
        return Problem(f"{where}.data", "holds a value that is not a finite number (NaN or infinity)")
    chash = value.get("content_hash")
    if chash is not None and not _is_hex64(chash):
        return Problem(f"{where}.content_hash", "must be the sha256 of the content (64 lowercase hex digits)")
    return Vector(model=model, dim=dim, data=blob, content_hash=chash)
