"""Coordinate-wise median (Yin et al., ICML 2018): each coordinate of the aggregate is the median of the clients'
values there (the mean of the two middle values for an even count, as numpy's)."""

from __future__ import annotations

import torch
from torch import Tensor

from fedsim.robust.gather import GatheredRows


def coordinate_median(rows: GatheredRows) -> Tensor:
    out = torch.empty(rows.rows.shape[1], device=rows.device)
    n = rows.n
    for lo, hi, block in rows.blocks():
        ordered = block.sort(dim=0).values
        out[lo:hi] = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
    return out
