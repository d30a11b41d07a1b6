"""The geometric median by smoothed Weiszfeld (RFA, Pillutla et al. 2019): from the weighted mean, each step
re-weights the updates by ``alpha_i / max(nu, ||v - x_i||)`` and takes their weighted mean, until a step moves
the estimate by no more than ``tolerance`` of its length (``||v' - v|| <= tolerance ||v'||``) or ``iterations``
steps are taken; a round that stops at the cap is reported (``capped_rounds`` in the summary). The estimate is
kept in float64. (RFA's own stop, a relative change of the objective, ends far from the fixed point when a few
updates are huge: the objective is then theirs and barely moves.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.config.robust import GatheringConfig, register_aggregator
from fedsim.robust.aggregation import Rule
from fedsim.robust.gather import GatheredRows


def _weighted_mean(rows: GatheredRows, weights: Tensor) -> Tensor:
    out = torch.empty(rows.rows.shape[1], dtype=torch.float64, device=rows.device)
    for lo, hi, block in rows.blocks():
        out[lo:hi] = weights @ block.double() / weights.sum()
    return out


def _distances(rows: GatheredRows, v: Tensor) -> Tensor:
    distance = torch.zeros(rows.n, dtype=torch.float64, device=rows.device)
    for lo, hi, block in rows.blocks():
        distance += ((block.double() - v[lo:hi]) ** 2).sum(1)
    return distance.sqrt()


def geometric_median(rows: GatheredRows, iterations: int, nu: float, tolerance: float = 0.0) -> tuple[Tensor, bool]:
    """The smoothed Weiszfeld estimate, and whether it met the tolerance (False: it stopped at the cap)."""
    alpha = rows.weights.double() / rows.weights.double().sum()
    v = _weighted_mean(rows, alpha)
    for _ in range(iterations):
        beta = alpha / _distances(rows, v).clamp_min(nu)
        v, previous = _weighted_mean(rows, beta), v
        if float((v - previous).norm()) <= tolerance * float(v.norm()):
            return v.float(), True
    return v.float(), False


class GeometricMedianConfig(GatheringConfig):
    """``geometric_median``: smoothed Weiszfeld from the weighted mean, to ``tolerance`` or ``iterations`` steps."""

    kind: Literal["geometric_median"] = "geometric_median"
    iterations: int = Field(100, ge=1, le=10_000, description="Weiszfeld steps at most")
    tolerance: float = Field(1e-5, ge=0, le=1, description="stop when a step moves the estimate less, relatively")
    smoothing: float = Field(1e-6, gt=0, le=1, description="least distance (nu)")
    assumes_minority: ClassVar[bool] = True


@register_aggregator(GeometricMedianConfig)
class GeometricMedian(Rule):
    cfg: GeometricMedianConfig

    def __init__(self, cfg: GeometricMedianConfig, numel: int, device: torch.device) -> None:
        super().__init__(cfg, numel, device)
        self.capped: list[int] = []  # rounds that stopped at the cap, not the tolerance

    def aggregate(self, rows: GatheredRows) -> Tensor:
        v, converged = geometric_median(rows, self.cfg.iterations, self.cfg.smoothing, self.cfg.tolerance)
        if not converged:
            self.capped.append(self.view.round)
            self.notes.once(
                "capped",
                f"aggregator.kind=geometric_median: round {self.view.round} stopped at"
                f" iterations={self.cfg.iterations} before tolerance={self.cfg.tolerance:g}; summary.json's"
                " aggregator.capped_rounds lists every such round",
            )
        return v

    def report(self) -> dict[str, Any]:
        return {"capped_rounds": list(self.capped)}

    def load_report(self, report: Mapping[str, Any]) -> None:
        self.capped = [int(r) for r in report.get("capped_rounds", [])]
