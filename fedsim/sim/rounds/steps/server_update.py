"""The algorithm's server update moves the model through the server optimiser (1-bit LAMB's server half among
them), when some client's update is in the sums or DP released its noise, and no step failed the round."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fedsim.config import LrSchedule
from fedsim.sim.rounds.planned import PlannedStage, PlanSettings, without_kind
from fedsim.sim.rounds.steps.base import RunParts, ServerRound, Step, register_step

if TYPE_CHECKING:
    from fedsim.algorithms.base import Algorithm
    from fedsim.algorithms.server import ServerStep


@register_step
@dataclass(frozen=True)
class ServerUpdate(Step):
    name = "server_update"
    after = ("after_release",)
    step: ServerStep
    algorithm: Algorithm

    @classmethod
    def planned(cls, cfg: PlanSettings) -> list[PlannedStage]:
        lines = [PlannedStage("server_update", "server", cfg.algorithm.kind, {})]
        if not type(cfg.algorithm).elects_leaders:  # the optimiser steps the model by the algorithm's update
            settings = without_kind(cfg.server_optimizer.settings())
            if cfg.server_optimizer.schedule == LrSchedule():
                del settings["schedule"]
            lines.append(PlannedStage("server_optimizer", "server", cfg.server_optimizer.kind, settings))
        return lines

    @classmethod
    def build(cls, run: RunParts) -> ServerUpdate:
        return cls(run.server_step, run.algorithm)

    def apply_(self, at: ServerRound) -> None:
        if not at.failed and (at.trained or at.released):
            self.step.step_(self.algorithm, at.model, at.sums, at.n_params)
            at.updated = True
