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


def planned(name: str, consumes: str, summary: str) -> type[PlannedPass]:
    """A registered-by-name pass class."""
    return type(f"{name.title()}Pass", (PlannedPass,),
                {"name": name, "consumes": consumes, "summary": summary, "__doc__": summary})


ClassifyPass = planned("classify", "queue", "Resolves kind 'auto' into a configured kind.")
ExtractPass = planned("extract", "queue", "Finds entities and grounded atomic facts.")
ConsolidatePass = planned("consolidate", "queue", "Collapses duplicates; proposes merges.")
ReflectPass = planned("reflect", "queue", "Proposes supersessions for contradictions.")
DecayPass = planned("decay", "schedule", "Decays importance with age since last access.")
RetentionPass = planned("retention", "schedule", "Expires session rows and erases forgotten ones.")
