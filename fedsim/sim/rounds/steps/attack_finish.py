"""Omniscient attackers (ALIE, IPM, a tailored attack, your own that reads the honest updates) write their rows
once the honest ones are known, before the ranks' sums are combined."""

from __future__ import annotations

from dataclasses import dataclass

from fedsim.sim.rounds.planned import PlannedStage, PlanSettings
from fedsim.sim.rounds.steps.base import RunParts, ServerRound, Step, register_step


@register_step
@dataclass(frozen=True)
class AttackFinish(Step):
    name = "attack_finish"
    before = ("all_reduce",)
    run: RunParts

    @classmethod
    def planned(cls, cfg: PlanSettings) -> list[PlannedStage]:
        return [PlannedStage("attack_finish", "server", cfg.attack.kind, {})] if cfg.attack.reads_honest else []

    @classmethod
    def build(cls, run: RunParts) -> AttackFinish | None:
        return cls(run) if run.attack is not None and run.attack.omniscient else None

    def apply_(self, at: ServerRound) -> None:
        run = self.run
        assert run.attack is not None
        at.ledger.record_moved(run.attack.finish_(at.all_reduce, at.sums, run.robust, run.server_stages, run.uplink))
