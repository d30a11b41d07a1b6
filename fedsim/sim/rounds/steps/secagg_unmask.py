"""SecAgg+ unmasks the sum of the surviving clients' masked updates (a round it cannot unmask fails)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedsim.sim.rounds.planned import PlannedStage, PlanSettings
from fedsim.sim.rounds.steps.base import RunParts, ServerRound, Step, register_step

if TYPE_CHECKING:
    from fedsim.privacy.secagg import SecAggPlus


@register_step
@dataclass(frozen=True)
class SecAggUnmask(Step):
    name = "secagg_unmask"
    after = ("all_reduce",)
    secagg: SecAggPlus

    @classmethod
    def planned(cls, cfg: PlanSettings) -> list[PlannedStage]:
        return [PlannedStage("secagg_unmask", "server", "secagg_plus", {})] if cfg.secagg.enabled else []

    @classmethod
    def build(cls, run: RunParts) -> SecAggUnmask | None:
        return cls(run.secagg) if run.secagg is not None else None

    def apply_(self, at: ServerRound) -> None:
        if not at.failed:
            at.failed = self.secagg.aggregate_(at.all_reduce, at.sums, at.ledger)
