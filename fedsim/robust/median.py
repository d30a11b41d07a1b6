"""Coordinate-wise median (Yin et al., ICML 2018): each coordinate of the aggregate is the median of the clients'
values there (the mean of the two middle values for an even count, as numpy's)."""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from torch import Tensor

from fedsim.config.robust import GatheringConfig, register_aggregator
from fedsim.robust.aggregation import Rule
from fedsim.robust.gather import GatheredRows


def coordinate_median(rows: GatheredRows) -> Tensor:
    out = torch.empty(rows.rows.shape[1], device=rows.device)
    for lo, hi, block in rows.blocks():
        out[lo:hi] = median_of(block)
    return out


def median_of(rows: Tensor) -> Tensor:
    """The coordinate-wise median of the rows (n, d): the middle value, or the mean of the middle two."""
    n, ordered = rows.shape[0], rows.sort(dim=0).values
    return (ordered[(n - 1) // 2] + ordered[n // 2]) / 2


class MedianConfig(GatheringConfig):
    """``median``: the coordinate-wise median."""

    kind: Literal["median"] = "median"
    assumes_minority: ClassVar[bool] = True


@register_aggregator(MedianConfig)
class Median(Rule):
    def aggregate(self, rows: GatheredRows) -> Tensor:
        return coordinate_median(rows)
