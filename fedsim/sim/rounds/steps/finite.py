"""A diverged model stops the run: once the round's update (and any stage after it) has moved the model, a
model with a NaN or an infinite entry ends the run with status ``diverged`` and one line naming the round and
the clients whose training loss was not finite, instead of a normal finish over a model of NaNs.

A non-finite client update that the aggregation rule leaves out (a median, a trimmed mean) does not diverge
the model, and is not reported: what is checked is the model the round releases. Under DP the clients are not
named (their losses are what DP withholds); the round is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from fedsim.sim.persist.diverged import Diverged
from fedsim.sim.rounds.planned import PlannedStage, PlanSettings
from fedsim.sim.rounds.steps.base import RunParts, ServerRound, Step, register_step


@register_step
@dataclass(frozen=True)
class FiniteModel(Step):
    name = "finite_model"
    after = ("after_update",)
    before = ("downlink",)
    names_clients: bool

    @classmethod
    def planned(cls, cfg: PlanSettings) -> list[PlannedStage]:
        return []  # a guard on every run, not a part of its method

    @classmethod
    def build(cls, run: RunParts) -> FiniteModel:
        return cls(names_clients=run.privacy is None)

    def apply_(self, at: ServerRound) -> None:
        if not bool(torch.isfinite(at.model).all()):  # one pass over the model, once a round
            clients = sorted({rec.cid for rec in at.records if not math.isfinite(rec.loss)})
            raise Diverged(at.index, clients if self.names_clients else None)
