"""Your own aggregation rule: the mean around the median (MeaMed, Xie, Koyejo & Gupta 2018), written here.

    python examples/own_rule.py                        # from Python, against sign-flipping attackers
    fedsim run examples/own_rule.yaml                  # from YAML: aggregator.factory names the class below

At each coordinate, the ``n - byzantine`` values nearest the coordinate-wise median are averaged (ties to the
lower client index), each with its client's weight. Its settings declare ``gathers`` (it needs each client's
update, so the round gathers them and SecAgg+ is refused beside it) and ``assumes_minority``. Nothing in
fedsim is edited: the decorator registers the kind.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.config import register_aggregator
from fedsim.config.robust import GatheringConfig
from fedsim.robust import Rule
from fedsim.robust.gather import GatheredRows


class MeaMedConfig(GatheringConfig):
    kind: Literal["meamed"] = "meamed"
    byzantine: int = Field(1, ge=0, description="values dropped at each coordinate: those farthest from the median")
    assumes_minority: ClassVar[bool] = True

    def least_cohort(self) -> int:
        return self.byzantine + 1


@register_aggregator(MeaMedConfig)
class MeaMed(Rule):
    cfg: MeaMedConfig

    def aggregate(self, rows: GatheredRows) -> Tensor:
        keep = rows.n - self.cfg.byzantine
        out = torch.empty(rows.rows.shape[1], device=rows.device)
        for lo, hi, block in rows.blocks():  # a few columns at a time when the rows are memory-mapped
            median = block.median(0).values  # the lower middle value, as torch takes it
            distance = (block - median).abs()
            nearest = torch.sort(distance, dim=0, stable=True).indices[:keep]  # ties to the lower index
            weights = rows.weights[:, None].expand_as(block).gather(0, nearest)
            out[lo:hi] = (block.gather(0, nearest) * weights).sum(0) / weights.sum(0)
        return out


if __name__ == "__main__":
    from fedsim import Simulation

    for rule in ("mean", "meamed"):
        config = {
            "name": f"own-rule-{rule}",
            "rounds": 10,
            "clients_per_round": 10,
            "progress": False,
            "data": {"dataset": "digits", "clients": 20},
            "model": {"kind": "mlp", "hidden": [32]},
            "algorithm": {"kind": "fedavg", "lr": 0.1},
            "attack": {"kind": "sign_flip", "fraction": 0.2, "scale": 4.0},
            "aggregator": {"kind": rule, **({"byzantine": 4} if rule == "meamed" else {})},
        }
        summary = Simulation(config, out=f"runs/own-rule-{rule}").run()
        print(f"{rule}: final_accuracy={summary.final_accuracy:.4f}")
