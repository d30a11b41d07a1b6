"""The geometric median by smoothed Weiszfeld (RFA, Pillutla et al. 2019): from the weighted mean, each step
re-weights the updates by ``alpha_i / max(nu, ||v - x_i||)`` and takes their weighted mean."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.config.robust import GatheringConfig, register_aggregator
from fedsim.robust.aggregation import Rule
from fedsim.robust.gather import GatheredRows


def _weighted_mean(rows: GatheredRows, weights: Tensor) -> Tensor:
    out = torch.empty(rows.rows.shape[1], device=rows.device)
    for lo, hi, block in rows.blocks():
        out[lo:hi] = weights.to(block.dtype) @ block / weights.sum()
    return out


def geometric_median(rows: GatheredRows, iterations: int, nu: float) -> Tensor:
    alpha = rows.weights / rows.weights.sum()
    v = _weighted_mean(rows, alpha)
    for _ in range(iterations):
        distance = torch.zeros(rows.n, dtype=torch.float64, device=rows.device)
        for lo, hi, block in rows.blocks():
            distance += ((block - v[lo:hi]).double() ** 2).sum(1)
        beta = alpha.double() / distance.sqrt().clamp_min(nu)
        v = _weighted_mean(rows, beta.float())
    return v


class GeometricMedianConfig(GatheringConfig):
    """``geometric_median``: smoothed Weiszfeld, ``iterations`` steps from the weighted mean."""

    kind: Literal["geometric_median"] = "geometric_median"
    iterations: int = Field(8, ge=1, le=1000, description="Weiszfeld steps")
    smoothing: float = Field(1e-6, gt=0, le=1, description="least distance (nu)")


@register_aggregator(GeometricMedianConfig)
class GeometricMedian(Rule):
    cfg: GeometricMedianConfig

    def aggregate(self, rows: GatheredRows) -> Tensor:
        return geometric_median(rows, self.cfg.iterations, self.cfg.smoothing)
