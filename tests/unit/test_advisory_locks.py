"""memoryd's PostgreSQL advisory lock keys ("memo" namespace, store/postgres/backend.py) are all
different: two uses that shared one key would block or refuse each other (the store copy's lock
and the lexical log's DDL lock both were 0x6D656D6F_0003 until 2026-12-06)."""

from __future__ import annotations

import ast
from pathlib import Path

import memoryd

SRC = Path(memoryd.__file__).parent
NAMESPACE = 0x6D656D6F


def lock_keys() -> dict[str, int]:
    """Every module-level integer constant whose name ends in _LOCK or _LOCKS, by module:name."""
    found: dict[str, int] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, int)
                    and node.targets[0].id.endswith(("_LOCK", "_LOCKS"))):
                found[f"{path.relative_to(SRC)}:{node.targets[0].id}"] = node.value.value
    return found


def test_every_advisory_lock_key_is_its_own() -> None:
    keys = {name: key for name, key in lock_keys().items() if NAMESPACE in (key >> 16, key >> 32)}
    assert len(keys) >= 5, keys  # the schema, audit lanes, copy, lexical log and vector log locks
    by_key: dict[int, list[str]] = {}
    for name, key in keys.items():
        by_key.setdefault(key, []).append(name)
    assert not {k: v for k, v in by_key.items() if len(v) > 1}
