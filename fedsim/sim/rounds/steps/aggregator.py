"""The aggregation rule puts its aggregate in the sums (a gathering rule over every row; a per-client rule
only observes the mean); a round with fewer updates than the rule is defined for fails."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedsim.sim.rounds.planned import PlannedStage, PlanSettings, without_kind
from fedsim.sim.rounds.steps.base import RunParts, ServerRound, Step, register_step

if TYPE_CHECKING:
    from fedsim.robust import RobustAggregation


@register_step
@dataclass(frozen=True)
class Aggregator(Step):
    name = "aggregator"
    after = ("before_rule",)
    robust: RobustAggregation

    @classmethod
    def planned(cls, cfg: PlanSettings) -> list[PlannedStage]:
        rule = cfg.aggregator
        return [PlannedStage("aggregator", "server", rule.kind, without_kind(rule.settings()))] if rule.enabled else []

    @classmethod
    def build(cls, run: RunParts) -> Aggregator | None:
        return cls(run.robust) if run.robust is not None else None

    def apply_(self, at: ServerRound) -> None:
        if not at.failed:
            at.failed = self.robust.aggregate_(at.all_reduce, at.sums, at.ledger)
