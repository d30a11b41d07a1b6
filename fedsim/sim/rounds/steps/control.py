"""SkewScout counts the round's steps and, on a probe round, scores its pairs of local models and turns the
knob for the next round; the probe's traffic is charged as ``probe``."""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.sim.rounds.planned import PlannedStage, PlanSettings
from fedsim.sim.rounds.steps.base import RunParts, ServerRound, Step, register_step


@register_step
@dataclass(frozen=True)
class Control(Step):
    name = "control"
    after = ("downlink",)
    run: RunParts

    @classmethod
    def planned(cls, cfg: PlanSettings) -> list[PlannedStage]:
        if not cfg.control.enabled:
            return []
        knob = cfg.control.knob
        return [PlannedStage("control", "server", cfg.control.kind, {"knob": knob.name if knob else None})]

    @classmethod
    def build(cls, run: RunParts) -> Control | None:
        return cls(run) if run.control is not None else None

    def apply_(self, at: ServerRound) -> None:
        control = self.run.control
        assert control is not None
        at.probe = control.end_round(self.run.executor.replica, at.model, self.run.sizes.model)
        if at.probe is not None:
            at.ledger.charge(up=at.probe.bytes // 2, down=at.probe.bytes // 2, kind="probe")
