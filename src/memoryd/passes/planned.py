"""Passes registered by name whose bodies arrive in later versions.

They appear in status (so an operator sees the whole pipeline) but nothing
enqueues for them and the runner never selects them.
"""

from __future__ import annotations

from typing import ClassVar

from memoryd.passes.base import Pass, PassContext, PassResult
from memoryd.queue.jobs import Job


class PlannedPass(Pass):
    implemented: ClassVar[bool] = False
    summary: ClassVar[str] = ""

    def run(self, batch: list[Job], ctx: PassContext) -> PassResult:
        raise NotImplementedError(f"the {self.name} pass is not implemented in this version")


def planned(name: str, consumes: str, model_backed: bool, summary: str) -> type[PlannedPass]:
    """A registered-by-name pass class."""
    return type(f"{name.title()}Pass", (PlannedPass,),
                {"name": name, "consumes": consumes, "model_backed": model_backed,
                 "summary": summary, "__doc__": summary})


ReflectPass = planned("reflect", "queue", True, "Proposes supersessions for contradictions.")
