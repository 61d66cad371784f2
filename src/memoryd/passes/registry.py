"""The one table of passes, in pipeline order."""

from __future__ import annotations

from memoryd.passes.base import Pass
from memoryd.passes.embed import EmbedPass
from memoryd.passes.planned import (
    ClassifyPass,
    ConsolidatePass,
    DecayPass,
    ExtractPass,
    ReflectPass,
    RetentionPass,
)

PASS_CLASSES: tuple[type[Pass], ...] = (
    EmbedPass,
    ClassifyPass,
    ExtractPass,
    ConsolidatePass,
    ReflectPass,
    DecayPass,
    RetentionPass,
)


def build_passes() -> dict[str, Pass]:
    """One instance of every registered pass, keyed by name."""
    passes: dict[str, Pass] = {}
    for cls in PASS_CLASSES:
        if cls.name in passes:
            raise RuntimeError(f"two passes are registered as {cls.name!r}; rename one")
        passes[cls.name] = cls()
    return passes


def write_passes(passes: dict[str, Pass]) -> list[str]:
    """Queue-driven, implemented passes a new memory is enqueued for."""
    return [p.name for p in passes.values() if p.implemented and p.consumes == "queue"]
