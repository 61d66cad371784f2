"""``CROSS JOIN`` in SQLAlchemy Core: SQLite's way of fixing the order of a join.

SQLite's planner never reorders the tables of a ``CROSS JOIN``: the left one is
the outer loop. Core has no such join, so this is a Join that renders as one
on SQLite (and as a plain JOIN elsewhere, where it means the same rows).
"""

from __future__ import annotations

import itertools
from typing import Any

from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.selectable import Join


class CrossJoin(Join):
    """``left CROSS JOIN right ON onclause``: the same rows as an inner join, in SQLite's
    loop order left then right."""

    inherit_cache = True


@compiles(CrossJoin, "sqlite")
def _render(join: CrossJoin, compiler: SQLCompiler, asfrom: bool = False, from_linter: Any = None,
            **kw: Any) -> str:
    assert join.onclause is not None
    if from_linter:  # as SQLCompiler.visit_join records a join's edges
        from_linter.edges.update(itertools.product(join.left._from_objects, join.right._from_objects))
    left = join.left._compiler_dispatch(compiler, asfrom=True, from_linter=from_linter, **kw)
    right = join.right._compiler_dispatch(compiler, asfrom=True, from_linter=from_linter, **kw)
    on = join.onclause._compiler_dispatch(compiler, from_linter=from_linter, **kw)
    return f"{left} CROSS JOIN {right} ON {on}"
