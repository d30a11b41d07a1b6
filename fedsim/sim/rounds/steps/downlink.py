"""The downlink compresses the broadcast: the model the clients hold next round (with its error feedback)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedsim.sim.rounds.planned import PlannedStage, PlanSettings
from fedsim.sim.rounds.steps.base import RunParts, ServerRound, Step, register_step

if TYPE_CHECKING:
    from fedsim.comm.downlink import Downlink


@register_step
@dataclass(frozen=True)
class Broadcast(Step):
    name = "downlink"
    after = ("after_update",)
    downlink: Downlink

    @classmethod
    def planned(cls, cfg: PlanSettings) -> list[PlannedStage]:
        if not cfg.downlink.enabled:
            return []
        down = cfg.downlink.settings()
        return [PlannedStage("downlink", "server", str(down.pop("kind")), down)]

    @classmethod
    def build(cls, run: RunParts) -> Broadcast | None:
        return cls(run.downlink) if run.downlink is not None else None

    def apply_(self, at: ServerRound) -> None:
        self.downlink.broadcast_(at.model, at.index)
