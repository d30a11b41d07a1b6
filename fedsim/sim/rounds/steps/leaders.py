"""LGD's election: every rank elects the same leaders from the gathered losses and adopts their models
(:mod:`fedsim.sim.rounds.leaders`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedsim.sim.rounds.leaders import elect_if_due
from fedsim.sim.rounds.planned import PlannedStage, PlanSettings
from fedsim.sim.rounds.steps.base import RunParts, ServerRound, Step, register_step

if TYPE_CHECKING:
    from fedsim.algorithms.fedlgd import FedLgd


@register_step
@dataclass(frozen=True)
class Leaders(Step):
    name = "leaders"
    after = ("server_update",)
    leaders: FedLgd
    run: RunParts

    @classmethod
    def planned(cls, cfg: PlanSettings) -> list[PlannedStage]:
        return [PlannedStage("leaders", "server", cfg.algorithm.kind, {})] if type(cfg.algorithm).elects_leaders else []

    @classmethod
    def build(cls, run: RunParts) -> Leaders | None:
        return cls(run.leaders, run) if run.leaders is not None else None

    def apply_(self, at: ServerRound) -> None:
        elect = (at.index, at.records, at.mine, self.run.store, self.run.pool, at.model, at.ledger)
        at.metrics |= elect_if_due(self.leaders, *elect)  # the global leader, how many clients led
