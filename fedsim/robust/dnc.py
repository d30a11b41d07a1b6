"""Divide-and-Conquer (DnC; Shejwalkar and Houmansadr, NDSS 2021, Algorithm 2), the defence of the paper whose
attacks tune themselves to a rule. Each of ``iterations`` (the paper's ``niters``) times it

1. draws ``dimension`` (``b``) of the ``d`` coordinates at random (all of them when ``d <= b``);
2. centres the ``n`` updates' sub-vectors on their mean;
3. takes the top right singular vector ``v`` of the centred ``n x b`` matrix;
4. scores each update by its squared projection on ``v``, ``<g_i[r] - mu, v>^2`` (the paper writes the full
   ``g_i`` here, which has ``d`` entries to ``v``'s ``b``: the sub-vector is the only product defined);
5. keeps the ``n - c m`` lowest-scored, ``c = filter``, ``m = byzantine`` (``floor(c m)`` dropped);

and the updates kept in every iteration, the intersection of the good sets (``good_sets: intersection``, as
Algorithm 2 combines them), are averaged. The paper's evaluation sets ``niters``, ``c`` and ``b`` to 1, 1 and
10,000 for every dataset: these are the defaults. ``good_sets: union`` keeps an update kept in any iteration,
as the blades library's first ``Dnc`` (num_iters 1, the good sets extended into one set) does; with one
iteration the two are the same. The draws come from a stream keyed by the run's seed and the round, so every rank
keeps the same updates."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.config import ConfigError
from fedsim.config.robust import register_aggregator
from fedsim.robust.aggregation import Rule
from fedsim.robust.gather import GatheredRows
from fedsim.robust.krum import ByzantineConfig
from fedsim.streams import noise_generator

_COORDINATES = 0xDC  # the coordinates' stream, beside the seed and the round


class DnCConfig(ByzantineConfig):
    """``dnc``: the updates that score below the ``filter * byzantine`` largest outlier scores in ``iterations``
    random subsamples of ``dimension`` coordinates (in every one, or with ``good_sets: union`` in any), averaged."""

    kind: Literal["dnc"] = "dnc"
    iterations: int = Field(1, ge=1, le=1000, description="random subsamples, each filtering on its own (niters)")
    dimension: int = Field(10_000, ge=1, description="coordinates a subsample draws, all if fewer (b)")
    filter: float = Field(1.0, gt=0, le=10, description="filter * byzantine updates dropped per subsample (c)")
    good_sets: Literal["intersection", "union"] = Field(
        "intersection", description="keep the updates kept by every subsample (Algorithm 2) or by any"
    )
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


def dnc_good_sets(rows: Tensor, coordinates: list[Tensor], dropped: int) -> list[set[int]]:
    """For each subsample of the rows (n, d): the ``n - dropped`` rows of lowest outlier score (ties to the lower
    index)."""
    n, good = rows.shape[0], []
    for chosen in coordinates:
        sub = rows[:, chosen.to(rows.device)].double()
        centred = sub - sub.mean(0)
        top = torch.linalg.svd(centred, full_matrices=False).Vh[0]
        scores = (centred @ top) ** 2
        good.append({int(i) for i in scores.argsort(stable=True)[: n - dropped]})
    return good


def dnc_kept(rows: Tensor, coordinates: list[Tensor], dropped: int, union: bool = False) -> list[int]:
    """The rows (n, d) kept in every subsample (``union``: in any), each subsample dropping the ``dropped``
    highest outlier scores."""
    good = dnc_good_sets(rows, coordinates, dropped)
    return sorted(set.union(*good) if union else set.intersection(*good))


@register_aggregator(DnCConfig)
class DnC(Rule):
    cfg: DnCConfig

    def aggregate(self, rows: GatheredRows) -> Tensor:
        cfg = self.cfg
        coordinates = dnc_coordinates(
            self.view.seed, self.view.round, rows.rows.shape[1], cfg.dimension, cfg.iterations
        )
        dropped = math.floor(cfg.filter * cfg.byzantine)
        kept = dnc_kept(rows.rows, coordinates, dropped, cfg.good_sets == "union")
        if not kept:  # the subsamples' good sets share no update (iterations > 1, intersection only)
            raise ConfigError(
                f"aggregator.kind=dnc: the {cfg.iterations} subsamples' good sets of round {self.view.round} share"
                f" no update of {rows.n}; lower aggregator.iterations or aggregator.filter, or set"
                " aggregator.good_sets=union"
            )
        return rows.rows[kept].mean(0)
