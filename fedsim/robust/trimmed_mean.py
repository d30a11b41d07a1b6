"""Coordinate-wise trimmed mean (Yin et al., ICML 2018): at each coordinate the ``floor(trim * n)`` largest and
as many smallest values are dropped and the rest averaged, each with its client's weight (uniform weights give
the paper's mean; ``trim`` 0 gives FedAvg's weighted mean)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from fedsim.robust.gather import GatheredRows


def trimmed_mean(rows: GatheredRows, trim: float) -> Tensor:
    n = rows.n
    cut = math.floor(trim * n)
    out = torch.empty(rows.rows.shape[1], device=rows.device)
    for lo, hi, block in rows.blocks():
        ordered, order = block.sort(dim=0)
        kept, weights = ordered[cut : n - cut], rows.weights[order[cut : n - cut]]
        out[lo:hi] = (kept * weights).sum(0) / weights.sum(0)
    return out
