"""Coordinate-wise trimmed mean (Yin et al., ICML 2018): at each coordinate the ``floor(trim * n)`` largest and
as many smallest values are dropped and the rest averaged, each with its client's weight (uniform weights give
the paper's mean; ``trim`` 0 gives FedAvg's weighted mean)."""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.config.robust import GatheringConfig, register_aggregator
from fedsim.robust.aggregation import Rule
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


class TrimmedMeanConfig(GatheringConfig):
    """``trimmed_mean``: coordinate-wise, the ``trim`` fraction of largest and of smallest values dropped."""

    kind: Literal["trimmed_mean"] = "trimmed_mean"
    trim: float = Field(0.1, ge=0, lt=0.5, description="fraction dropped from each end")


@register_aggregator(TrimmedMeanConfig)
class TrimmedMean(Rule):
    cfg: TrimmedMeanConfig

    def aggregate(self, rows: GatheredRows) -> Tensor:
        return trimmed_mean(rows, self.cfg.trim)
