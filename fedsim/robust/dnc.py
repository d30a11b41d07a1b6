"""Divide-and-Conquer (DnC; Shejwalkar and Houmansadr, NDSS 2021, Algorithm 2), the defence of the paper whose
attacks tune themselves to a rule: ``iterations`` times, it draws ``dimension`` coordinates at random, centres
the updates' sub-vectors on their mean, scores each update by its squared projection on the top right singular
vector of the centred matrix, and keeps the ``n - filter * byzantine`` lowest-scored; the updates kept in every
iteration are averaged. The draws come from a stream keyed by the run's seed and the round, so every rank keeps
the same updates."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.config.robust import register_aggregator
from fedsim.robust.aggregation import Rule
from fedsim.robust.gather import GatheredRows
from fedsim.robust.krum import ByzantineConfig
from fedsim.streams import noise_generator

_COORDINATES = 0xDC  # the coordinates' stream, beside the seed and the round


class DnCConfig(ByzantineConfig):
    """``dnc``: the updates that score below the ``filter * byzantine`` largest outlier scores in every one of
    ``iterations`` random subsamples of ``dimension`` coordinates, averaged."""

    kind: Literal["dnc"] = "dnc"
    iterations: int = Field(5, ge=1, le=1000, description="random subsamples, each filtering on its own")
    dimension: int = Field(10_000, ge=1, description="coordinates a subsample draws (all, if fewer)")
    filter: float = Field(1.0, gt=0, le=10, description="filter * byzantine updates dropped per subsample")
    least_formula: ClassVar[str] = "filter * f + 1"

    def least_cohort(self) -> int:
        return math.floor(self.filter * self.byzantine) + 1


def dnc_coordinates(seed: int, round_idx: int, numel: int, dimension: int, iterations: int) -> list[Tensor]:
    """Each iteration's sorted coordinates: ``dimension`` of ``numel`` without replacement (all of them when
    ``dimension >= numel``)."""
    if dimension >= numel:
        return [torch.arange(numel)] * iterations
    generator = noise_generator(torch.device("cpu"), seed, round_idx, _COORDINATES)
    return [torch.randperm(numel, generator=generator)[:dimension].sort().values for _ in range(iterations)]


def dnc_kept(rows: Tensor, coordinates: list[Tensor], dropped: int) -> list[int]:
    """The rows (n, d) kept in every subsample: each drops the ``dropped`` highest outlier scores."""
    n, kept = rows.shape[0], set(range(rows.shape[0]))
    for chosen in coordinates:
        sub = rows[:, chosen.to(rows.device)].double()
        centred = sub - sub.mean(0)
        top = torch.linalg.svd(centred, full_matrices=False).Vh[0]
        scores = (centred @ top) ** 2
        kept &= {int(i) for i in scores.argsort(stable=True)[: n - dropped]}
    return sorted(kept)


@register_aggregator(DnCConfig)
class DnC(Rule):
    cfg: DnCConfig

    def aggregate(self, rows: GatheredRows) -> Tensor:
        cfg = self.cfg
        coordinates = dnc_coordinates(
            self.view.seed, self.view.round, rows.rows.shape[1], cfg.dimension, cfg.iterations
        )
        kept = dnc_kept(rows.rows, coordinates, math.floor(cfg.filter * cfg.byzantine))
        return rows.rows[kept].mean(0)
