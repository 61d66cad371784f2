"""A GGUF file that makes llama.cpp abort the process that loads it (a real native crash).

The file is a valid GGUF v3 header for a ``gemma3`` model whose
``gemma3.block_count`` is 0 and which carries no tensors. llama.cpp parses it,
then checks the layer count with ``GGML_ASSERT(hparams.n_layer_all > 0 ...)``
in ``llama_model::load_hparams``; a failed GGML_ASSERT calls ``abort()``, so
the process dies by SIGABRT (exit -6) inside ``Llama(model_path=...)``: no
Python exception, nothing to catch, exactly like the AMX crash of issue 11
(which dies by SIGSEGV in a matmul) from the daemon's point of view.

memoryd builds the llama context on the first completion, so a daemon (or
``memoryd doctor``) given this file as ``--llm`` crashes its model worker on
every extract job.
"""

from __future__ import annotations

import struct
from pathlib import Path

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
TYPE_UINT32 = 4
TYPE_STRING = 8

#: The signal the worker dies of, as the daemon reports it.
CRASH_SIGNAL = "SIGABRT"
CRASH_CODE = -6


def _string(value: str) -> bytes:
    raw = value.encode()
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str, value: str | int) -> bytes:
    if isinstance(value, str):
        return _string(key) + struct.pack("<I", TYPE_STRING) + _string(value)
    return _string(key) + struct.pack("<I", TYPE_UINT32) + struct.pack("<I", value)


def gguf_bytes(metadata: dict[str, str | int]) -> bytes:
    """A GGUF v3 file with ``metadata`` and no tensors."""
    header = GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, 0, len(metadata))
    return header + b"".join(_kv(k, v) for k, v in metadata.items())


def write_crashing_gguf(path: Path) -> Path:
    """Write the zero-layer gemma3 GGUF to ``path`` and return it."""
    path.write_bytes(gguf_bytes({
        "general.architecture": "gemma3",
        "general.name": "zero-layer crash fixture",
        "gemma3.context_length": 1024,
        "gemma3.embedding_length": 64,
        "gemma3.block_count": 0,
    }))
    return path
