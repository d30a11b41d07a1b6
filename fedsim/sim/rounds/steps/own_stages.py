"""Your own server stages (fedsim.sim.server_stages) at their three points: before the rule, after DP's
release, after the server update. Each point is a step; the stages at it run in the order they are listed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from fedsim.config.server_stage import Point
from fedsim.sim.rounds.planned import PlannedStage, PlanSettings, without_kind
from fedsim.sim.rounds.steps.base import RunParts, ServerRound, Step, register_step
from fedsim.sim.server_stages import ServerStages, stage_names


@dataclass(frozen=True)
class OwnStages(Step):
    point: ClassVar[Point]
    stages: ServerStages

    @classmethod
    def planned(cls, cfg: PlanSettings) -> list[PlannedStage]:
        named = zip(stage_names(cfg.server_stages), cfg.server_stages, strict=True)
        own = [(name, stage) for name, stage in named if stage.at == cls.point]
        return [PlannedStage("server_stage", "server", name, without_kind(stage.settings())) for name, stage in own]

    @classmethod
    def build(cls, run: RunParts) -> OwnStages | None:
        placed = any(p.cfg.at == cls.point for p in run.server_stages.placed)
        return cls(run.server_stages) if placed else None

    def runs(self, at: ServerRound) -> bool:
        return not at.failed

    def apply_(self, at: ServerRound) -> None:
        if self.runs(at):
            at.failed = self.stages.at(self.point, at.view)


@register_step
class BeforeRule(OwnStages):
    name = point = "before_rule"
    after = ("secagg_unmask",)


@register_step
class AfterRelease(OwnStages):
    name = point = "after_release"
    after = ("dp_release",)


@register_step
class AfterUpdate(OwnStages):
    name = point = "after_update"
    after = ("leaders",)

    def runs(self, at: ServerRound) -> bool:
        return at.updated  # the new model: only where the server update moved it
