"""The geometric median by smoothed Weiszfeld (RFA, Pillutla et al. 2019): from the weighted mean, each step
re-weights the updates by ``alpha_i / max(nu, ||v - x_i||)`` and takes their weighted mean."""

from __future__ import annotations

import torch
from torch import Tensor

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
