"""The one table of passes, in pipeline order."""

from __future__ import annotations

from memoryd.passes.base import Pass
from memoryd.passes.classify import ClassifyPass
from memoryd.passes.consolidate import ConsolidatePass
from memoryd.passes.decay import DecayPass
from memoryd.passes.embed import EmbedPass
from memoryd.passes.extract import ExtractPass
from memoryd.passes.reflect import ReflectPass
from memoryd.passes.retention import RetentionPass

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


#: Passes a new memory is enqueued for at write time (others chain from them).
ON_WRITE = ("embed", "extract")


def write_passes(passes: dict[str, Pass]) -> list[str]:
    """Implemented passes a new memory is enqueued for."""
    return [name for name in ON_WRITE if name in passes and passes[name].implemented]
