"""FLAME (Nguyen et al., USENIX Security 2022), the paper's Algorithm 1 on the round's updates ``g_i`` and local
models ``W_i = G + g_i`` (``G`` the model the clients started from):

1. the pairwise cosine distances ``1 - cos(W_i, W_j)`` of the local models are clustered by HDBSCAN
   (scikit-learn's, ``min_cluster_size = n/2 + 1``, ``min_samples = 1``, one cluster allowed), and only the
   models in the majority cluster are admitted (none admitted: the aggregate is 0, the model stays);
2. the clipping bound ``S`` is the median of all the updates' lengths ``||W_i - G||``, and each admitted update
   is scaled to at most ``S``;
3. the aggregate is the mean of the clipped admitted updates plus Gaussian noise of standard deviation
   ``lambda * S`` in every coordinate (``noise`` = lambda, 0.001 in the paper for image classification), drawn
   from a stream keyed by the seed and the round.

Unweighted by the clients' samples, as the paper."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from pydantic import Field
from torch import Tensor

from fedsim.config.robust import GatheringConfig, register_aggregator
from fedsim.robust.aggregation import Rule
from fedsim.robust.gather import GatheredRows
from fedsim.streams import noise_generator

_NOISE = 0x464C  # the stream beside the seed and round for FLAME's noise


def model_cosine_distances(rows: GatheredRows, start: Tensor) -> np.ndarray:
    """(n, n) ``1 - cos(W_i, W_j)`` for the local models ``W_i = start + g_i``, in float64."""
    s = start.double()
    along = torch.zeros(rows.n, dtype=torch.float64, device=rows.device)
    for lo, hi, block in rows.blocks():
        along += block.double() @ s[lo:hi]
    gram = rows.gram()
    gram = (gram + gram.t()) / 2 + along[:, None] + along[None, :] + s @ s  # <W_i, W_j>
    norms = gram.diagonal().clamp_min(0).sqrt()
    cosine = gram / (norms[:, None] * norms[None, :]).clamp_min(1e-300)
    distances = (1 - cosine).clamp_min(0).fill_diagonal_(0)
    return distances.cpu().numpy()


def admitted(distances: np.ndarray) -> list[int]:
    """The rows in HDBSCAN's majority cluster (``min_cluster_size = n // 2 + 1``), in row order."""
    from sklearn.cluster import HDBSCAN  # scikit-learn's import is a second: not for runs without FLAME

    n = distances.shape[0]
    labels = HDBSCAN(
        min_cluster_size=n // 2 + 1, min_samples=1, metric="precomputed", allow_single_cluster=True, copy=True
    ).fit_predict(distances)
    clusters = labels[labels >= 0]
    if clusters.size == 0:
        return []
    majority = np.bincount(clusters).argmax()
    return [i for i in range(n) if labels[i] == majority]


def flame(rows: GatheredRows, start: Tensor, noise: float, generator: torch.Generator | None) -> tuple[Tensor, int]:
    """FLAME's aggregate of the rows, and how many updates it admitted."""
    chosen = admitted(model_cosine_distances(rows, start))
    out = torch.zeros(rows.rows.shape[1], device=rows.device)
    if not chosen:
        return out, 0
    square = torch.zeros(rows.n, dtype=torch.float64, device=rows.device)
    for _, _, block in rows.blocks():
        square += (block.double() ** 2).sum(1)
    lengths = square.sqrt()
    bound = float(np.median(lengths.cpu().numpy()))  # the mean of the two middle lengths for an even n
    index = torch.tensor(chosen, device=rows.device)
    coefficients = (bound / lengths[index].clamp_min(1e-30)).clamp_max(1.0) / len(chosen)
    for lo, hi, block in rows.blocks():
        out[lo:hi] = (coefficients @ block[index].double()).float()
    if noise > 0 and generator is not None:
        out += torch.randn(out.shape, generator=generator, device=out.device) * (noise * bound)
    return out, len(chosen)


class FlameConfig(GatheringConfig):
    """``flame``: HDBSCAN's majority cluster of the local models, clipped to the median length, noised."""

    kind: Literal["flame"] = "flame"
    noise: float = Field(0.001, ge=0, le=10, description="lambda: the noise's std over the clipping bound")
    assumes_minority: ClassVar[bool] = True

    def least_cohort(self) -> int:
        return 2  # HDBSCAN clusters two points or more


@register_aggregator(FlameConfig)
class Flame(Rule):
    cfg: FlameConfig

    def __init__(self, cfg: FlameConfig, numel: int, device: torch.device) -> None:
        super().__init__(cfg, numel, device)
        self.admitted: list[int] = []  # updates admitted, round by round

    def aggregate(self, rows: GatheredRows) -> Tensor:
        start = self.view.start if self.view.start is not None else torch.zeros(rows.rows.shape[1], device=rows.device)
        generator = noise_generator(rows.device, self.view.seed, self.view.round, _NOISE)
        out, count = flame(rows, start, self.cfg.noise, generator)
        self.admitted.append(count)
        return out

    def report(self) -> dict[str, Any]:
        return {"admitted": list(self.admitted)}

    def load_report(self, report: Mapping[str, Any]) -> None:
        self.admitted = [int(a) for a in report.get("admitted", [])]
