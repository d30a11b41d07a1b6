"""Coordinate-wise trimmed mean (Yin et al., ICML 2018): at each coordinate the ``floor(trim * n)`` largest and
as many smallest values are dropped and the rest averaged, as the paper defines it; with ``weighted`` each kept
value counts with its client's weight (equal values are ordered by client id, so which of them is dropped does
not depend on the order the clients trained in)."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.config.robust import GatheringConfig, register_aggregator
from fedsim.robust.aggregation import Rule
from fedsim.robust.gather import GatheredRows


def trimmed_mean(rows: GatheredRows, trim: float, weighted: bool = False) -> Tensor:
    n = rows.n
    cut = math.floor(trim * n)
    out = torch.empty(rows.rows.shape[1], device=rows.device)
    for lo, hi, block in rows.blocks():
        if not weighted:
            out[lo:hi] = trimmed_mean_of(block, trim)
            continue
        ordered, order = block.sort(dim=0, stable=True)  # rows are in client order: ties go by client id
        weights = rows.weights[order[cut : n - cut]]
        out[lo:hi] = (ordered[cut : n - cut] * weights).sum(0) / weights.sum(0)
    return out


def trimmed_mean_of(rows: Tensor, trim: float) -> Tensor:
    """The unweighted trimmed mean of the rows (n, d) of one tensor, in its dtype (what a tailored attack
    evaluates)."""
    cut = math.floor(trim * rows.shape[0])
    return rows.sort(dim=0).values[cut : rows.shape[0] - cut].mean(0)


class TrimmedMeanConfig(GatheringConfig):
    """``trimmed_mean``: coordinate-wise, the ``trim`` fraction of largest and of smallest values dropped."""

    kind: Literal["trimmed_mean"] = "trimmed_mean"
    trim: float = Field(0.1, ge=0, lt=0.5, description="fraction dropped from each end")
    weighted: bool = Field(False, description="weigh the kept values by their clients' weights")
    assumes_minority: ClassVar[bool] = True

    def tolerated(self, cohort: int) -> int:
        return math.floor(self.trim * cohort)  # the values dropped from each end

    def tolerance_setting(self) -> str:
        return f"aggregator.trim={self.trim:g} drops that many from each end; raise it"

    def cohort_refusal(self, cohort: int, fixed: bool) -> str | None:
        """Besides the base's: a ``trim`` that drops nothing from a round (``floor(trim * n) = 0``; on average,
        for Poisson cohorts) is the mean under another name. ``trim: 0`` says so and is allowed."""
        if self.trim > 0 and math.floor(self.trim * cohort) == 0:
            rounds = "a round" if fixed else "an average round"
            return (
                f"aggregator.trim={self.trim:g} drops floor({self.trim:g} x {cohort}) = 0 updates from each end of"
                f" {rounds} of {cohort} clients: the mean; use aggregator.trim={1 / cohort:.3g} or more"
            )
        return super().cohort_refusal(cohort, fixed)


@register_aggregator(TrimmedMeanConfig)
class TrimmedMean(Rule):
    cfg: TrimmedMeanConfig

    def aggregate(self, rows: GatheredRows) -> Tensor:
        return trimmed_mean(rows, self.cfg.trim, self.cfg.weighted)
