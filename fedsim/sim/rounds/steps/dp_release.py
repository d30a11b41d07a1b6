"""Central DP releases the noised sum over its fixed denominator (and moves an adaptive clip); local DP noised
each update on its client and has no release here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedsim.sim.rounds.planned import PlannedStage, PlanSettings, private
from fedsim.sim.rounds.steps.base import RunParts, ServerRound, Step, register_step

if TYPE_CHECKING:
    from fedsim.privacy.dp import DifferentialPrivacy


@register_step
@dataclass(frozen=True)
class DpRelease(Step):
    name = "dp_release"
    after = ("aggregator",)
    privacy: DifferentialPrivacy

    @classmethod
    def planned(cls, cfg: PlanSettings) -> list[PlannedStage]:
        privacy = cfg.privacy
        if not privacy.central:  # declared by the mechanism's settings class, never read off its name
            return []
        released = private(cfg, "noise_multiplier", "target_epsilon", "max_epsilon", "noise_cohort", "population")
        settings = released | {"delta": privacy.delta, "accountant": privacy.accountant}
        return [PlannedStage("dp_release", "server", privacy.kind, settings)]

    @classmethod
    def build(cls, run: RunParts) -> DpRelease | None:
        return cls(run.privacy) if run.privacy is not None and run.privacy.central else None

    def apply_(self, at: ServerRound) -> None:
        if not at.failed:
            self.privacy.release_(at.sums, at.index)
            at.released = True
