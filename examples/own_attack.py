"""Your own attack: the mimic attack of Karimireddy, He & Jaggi (ICLR 2022), written here.

    python examples/own_attack.py                      # from Python: mimic against the mean and the median
    fedsim run examples/own_attack.yaml                # from YAML: attack.factory names the class below

Under data heterogeneity an attacker need not invent anything: every malicious client copies one honest
client's update, the one that sits farthest along the direction the honest updates vary most (the top
eigenvector ``z`` of their covariance: ``i* = argmax_i |<z, g_i - mean>|``), so that one client's data is
over-represented and a robust rule cannot tell the copies from honest updates. The paper tracks ``z`` by power
iteration across rounds; here it is computed each round from the honest updates' Gram matrix. The settings
declare ``reads_honest`` and ``needs_rows``, so the round hands the attack every honest update (combined across
ranks); nothing in fedsim is edited: the decorator registers the kind.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from torch import Tensor

from fedsim.config import AttackConfig, register_attack
from fedsim.robust import HonestUpdates, ModelPoisoning


class MimicConfig(AttackConfig):
    kind: Literal["mimic"] = "mimic"
    reads_honest: ClassVar[bool] = True
    needs_rows: ClassVar[bool] = True


def mimicked(rows: Tensor) -> int:
    """The honest row (of ``rows`` (n, d)) farthest from the mean along the top principal direction: with
    ``X`` the centred rows and ``u`` the top eigenvector of ``X X^T``, ``X z`` is proportional to ``u`` for
    ``z = X^T u``, so it is ``argmax_i |u_i|`` (the lower index on a tie)."""
    centred = rows - rows.mean(0)
    _, vectors = torch.linalg.eigh(centred @ centred.T)  # ascending eigenvalues: the last column is the top
    weight = vectors[:, -1].abs()
    return int(torch.nonzero(weight == weight.max())[0])


@register_attack(MimicConfig)
class Mimic(ModelPoisoning):
    """Every malicious client sends a copy of the honest update :func:`mimicked` picks."""

    cfg: MimicConfig

    def craft(self, honest: HonestUpdates) -> Tensor:
        assert honest.rows is not None
        rows = honest.rows.double()
        return rows[mimicked(rows)].float()


if __name__ == "__main__":
    from fedsim import Simulation

    for aggregator in ("mean", "median"):
        config = {
            "name": f"own-attack-{aggregator}",
            "rounds": 10,
            "clients_per_round": 10,
            "progress": False,
            "data": {"dataset": "digits", "clients": 20},
            "model": {"kind": "mlp", "hidden": [32]},
            "algorithm": {"kind": "fedavg", "lr": 0.1},
            "aggregator": {"kind": aggregator},
            "attack": {"kind": "mimic", "fraction": 0.2},
        }
        summary = Simulation(config, out=f"runs/own-attack-{aggregator}").run()
        print(
            f"mimic vs {aggregator}: final_accuracy={summary.final_accuracy:.4f},"
            f" attacker turns={summary.attack['malicious_turns']}"
        )
