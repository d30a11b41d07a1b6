"""Min-max and min-sum (Shejwalkar & Houmansadr, NDSS 2021), the attacks that tune themselves to stay inside
the honest updates' own spread.

Both read every honest update of the round (their settings declare ``reads_honest`` and ``needs_rows``), and
every malicious client sends ``mean + gamma * p``: the honest mean moved along a perturbation ``p`` (the
negated unit mean, the negated coordinate-wise standard deviation, or the negated sign of the mean) as far
as the attack's condition allows. Min-max: the malicious update is no farther from any honest update than
two honest updates are from each other, ``max_i ||m - g_i|| <= max_ij ||g_i - g_j||``. Min-sum: its summed
squared distance to the honest updates is no more than any honest update's,
``sum_i ||m - g_i||^2 <= max_i sum_j ||g_i - g_j||^2``. ``gamma`` is found by the paper's halving search
from ``gamma_init`` to within ``tolerance``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.config.attack import AttackConfig, register_attack
from fedsim.robust.attack import HonestUpdates, ModelPoisoning


class MinMaxConfig(AttackConfig):
    kind: Literal["min_max"] = "min_max"
    perturbation: Literal["unit", "std", "sign"] = Field("std", description="the direction the mean moves in")
    gamma_init: float = Field(10.0, gt=0, le=1e6, description="the search's first step")
    tolerance: float = Field(1e-5, gt=0, le=1, description="the search stops when gamma moves less")
    reads_honest: ClassVar[bool] = True
    needs_rows: ClassVar[bool] = True


class MinSumConfig(MinMaxConfig):
    kind: Literal["min_sum"] = "min_sum"  # type: ignore[assignment]


def perturbation(rows: Tensor, kind: str) -> Tensor:
    """The paper's ``p``: ``-mean / ||mean||``, ``-std`` or ``-sign(mean)`` of the honest rows (n, d)."""
    mean = rows.mean(0)
    if kind == "unit":
        return -mean / mean.norm().clamp_min(1e-30)
    if kind == "std":
        return -rows.std(0, unbiased=True) if len(rows) > 1 else torch.zeros_like(mean)
    return -mean.sign()


def squared_distances(rows: Tensor) -> Tensor:
    """(n, n) squared L2 distances between the rows."""
    square = (rows * rows).sum(1)
    return (square[:, None] + square[None, :] - 2 * rows @ rows.T).clamp_min(0)


def halving_search(fits: Callable[[float], bool], gamma_init: float, tolerance: float) -> float:
    """The paper's Algorithm 1: the largest ``gamma`` (within ``tolerance``, at most ``2 gamma_init``) for which
    ``fits(gamma)`` holds, stepping by halves from ``gamma_init``."""
    gamma, step, found = gamma_init, gamma_init, 0.0
    while abs(found - gamma) > tolerance:
        if fits(gamma):
            found = gamma
            gamma += step / 2
        else:
            gamma -= step / 2
        step /= 2
    return found


@register_attack(MinMaxConfig)
class MinMax(ModelPoisoning):
    """Min-max: no farther from any honest update than the two farthest honest updates are apart."""

    cfg: MinMaxConfig

    def craft(self, honest: HonestUpdates) -> Tensor:
        assert honest.rows is not None
        rows = honest.rows.double()
        mean, p = rows.mean(0), perturbation(rows, self.cfg.perturbation)
        bound = self.bound(rows)

        def fits(gamma: float) -> bool:
            return self.spread(rows, mean + gamma * p) <= bound

        gamma = halving_search(fits, self.cfg.gamma_init, self.cfg.tolerance)
        return (mean + gamma * p).float()

    def bound(self, rows: Tensor) -> float:
        return float(squared_distances(rows).max())

    def spread(self, rows: Tensor, malicious: Tensor) -> float:
        return float(((rows - malicious) ** 2).sum(1).max())


@register_attack(MinSumConfig)
class MinSum(MinMax):
    """Min-sum: a summed squared distance to the honest updates no more than any honest update's."""

    def bound(self, rows: Tensor) -> float:
        return float(squared_distances(rows).sum(1).max())

    def spread(self, rows: Tensor, malicious: Tensor) -> float:
        return float(((rows - malicious) ** 2).sum())
