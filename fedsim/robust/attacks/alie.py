"""ALIE, "A little is enough" (Baruch et al., NeurIPS 2019): every malicious client sends ``mu - z * sigma``,
the coordinate-wise mean and standard deviation of the round's honest updates, ``z`` from the paper's formula
unless given."""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import ClassVar, Literal

from pydantic import Field
from torch import Tensor

from fedsim.config.attack import AttackConfig, register_attack
from fedsim.robust.attack import HonestUpdates, ModelPoisoning


def alie_z(n: int, malicious: int) -> float:
    """Baruch et al.'s ``z_max``: ``s = floor(n / 2 + 1) - m`` clients must be out-voted, so the malicious update
    may sit ``Phi^-1((n - s) / n)`` standard deviations from the mean without standing out."""
    s = math.floor(n / 2 + 1) - malicious
    return NormalDist().inv_cdf(min(max((n - s) / n, 0.5), 1 - 1e-9))


class AlieConfig(AttackConfig):
    kind: Literal["alie"] = "alie"
    z: float | None = Field(None, gt=0, le=100, description="deviations from the mean; default the paper's")
    reads_honest: ClassVar[bool] = True


@register_attack(AlieConfig)
class Alie(ModelPoisoning):
    cfg: AlieConfig

    def craft(self, honest: HonestUpdates) -> Tensor:
        z = self.cfg.z if self.cfg.z is not None else alie_z(honest.survivors, honest.attackers)
        return (honest.mean - z * honest.variance.sqrt()).float()
