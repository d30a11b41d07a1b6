"""Your own server step: a norm guard with state across rounds, written here.

    python examples/own_server_stage.py                # from Python: an attacked run with and without it
    fedsim run examples/own_server_stage.yaml          # from YAML: server_stages names the class below

Before the aggregation rule (``at: before_rule``) the guard reads the round's mean update (the clients' summed
weighted deltas over the sum of their weights) and compares its norm with the running mean of the norms it
accepted: past ``warmup`` rounds, a round ``factor`` times larger fails, and the model stays as it was (as after
a SecAgg+ round that could not be unmasked). It is a server-side anomaly check of the kind FLAME and FLTrust
refine per client. Its state (the running mean, the rounds it accepted and rejected) is JSON a checkpoint
keeps, so a resumed run rejects what the uninterrupted one does; its metrics go into each round's row as
``norm_guard.norm`` and ``norm_guard.rejected``. Nothing in fedsim is edited: the decorator registers the kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.config import ServerStageConfig, register_server_stage
from fedsim.sim.server_stages import ServerView, StageContext


class NormGuardConfig(ServerStageConfig):
    kind: Literal["norm_guard"] = "norm_guard"
    at: Literal["before_rule"] = "before_rule"
    factor: float = Field(3.0, gt=1, le=1e6, description="a round this many times the running mean norm fails")
    warmup: int = Field(2, ge=1, le=1_000_000, description="rounds accepted before the guard judges")
    decay: float = Field(0.8, ge=0, lt=1, description="the running mean's weight on its past")


@register_server_stage(NormGuardConfig)
class NormGuard:
    def __init__(self, cfg: NormGuardConfig, context: StageContext) -> None:
        self.cfg = cfg
        self.mean_norm = 0.0
        self.accepted = 0
        self.rejected: list[int] = []  # the rounds it failed
        self.last: dict[str, float] = {}

    def begin_round(self, r: int, cohort: Sequence[int]) -> None:
        self.last = {}

    def apply_(self, view: ServerView) -> bool:
        weight = float(view.sums["weight"])
        if weight <= 0:
            return False
        norm = float(torch.linalg.vector_norm(view.sums["delta"][: view.n_params])) / weight
        judged = self.accepted >= self.cfg.warmup
        reject = judged and norm > self.cfg.factor * self.mean_norm
        self.last = {"norm": norm, "rejected": float(reject)}
        if reject:
            self.rejected.append(view.round)
            return True
        self.mean_norm = norm if self.accepted == 0 else self.cfg.decay * self.mean_norm + (1 - self.cfg.decay) * norm
        self.accepted += 1
        return False

    def round_metrics(self) -> dict[str, float]:
        return self.last

    def state_dict(self) -> dict[str, Any]:
        return {"mean_norm": self.mean_norm, "accepted": self.accepted, "rejected": self.rejected}

    def tensors(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        self.mean_norm = float(state.get("mean_norm", 0.0))
        self.accepted = int(state.get("accepted", 0))
        self.rejected = [int(r) for r in state.get("rejected", [])]


if __name__ == "__main__":
    from fedsim import Simulation

    for stages in ([], [{"kind": "norm_guard"}]):
        config = {
            "name": "own-server-stage" + ("-guarded" if stages else ""),
            "rounds": 20,
            "clients_per_round": 8,
            "progress": False,
            "data": {"dataset": "digits", "clients": 40},
            "model": {"kind": "mlp", "hidden": [32]},
            "algorithm": {"name": "fedavg", "lr": 0.3},
            "attack": {"kind": "scale", "fraction": 0.05, "scale": 30.0},
            "server_stages": stages,
        }
        summary = Simulation(config, out=f"runs/{config['name']}").run()
        print(f"{config['name']}: final_accuracy={summary.final_accuracy:.4f}")
