"""Clipping a client's update to an L2 bound, fixed or adaptive (Andrew et al., arXiv 1905.03871).

A client's update is all its rows together (for the algorithms DP keeps private, the one ``delta`` row): it is
scaled by ``min(1, C / ||update||)``, so no client moves the sum by more than ``C``. Adaptive clipping moves
``C`` each round towards a quantile of the clients' norms, from the share ``b`` of clients left unclipped:
``C <- C * exp(-lr * (b - target_quantile))`` (the paper's geometric update), ``b`` itself released with
Gaussian noise. Each client sends its bit centred, ``b_i - 1/2`` (as TF Privacy's quantile estimator and
pfl-research do), so one client moves the released count by at most 1/2 when it is added or removed, half what
its clipped update moves the sum in units of ``C``; the server adds the noise and reads
``b = (sum + noise) / cohort + 1/2``. The two releases are then one Gaussian mechanism whose noise multiplier
``z`` satisfies ``z**-2 = z_update**-2 + (2 * count_noise)**-2`` (the paper's Theorem 1), so the update's noise
multiplier grows, ``z_update = (z**-2 - (2 * count_noise)**-2)**-0.5 > z``, to leave room for the count's
release under the configured ``z``. (Raw 0/1 bits would move the count by 1 and cost four times as much.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor


def clip_rows_(rows: Mapping[str, Tensor], bound: float) -> Tensor:
    """Scale each of the K clients' updates (``rows[name]`` (K, size), every segment of a client together) to
    L2 norm at most ``bound``, in place; returns the (K,) norms they had."""
    squares = [torch.linalg.vector_norm(block, dim=1).square() for block in rows.values()]
    norms = torch.stack(squares).sum(dim=0).sqrt()
    factors = (bound / norms.clamp_min(torch.finfo(norms.dtype).tiny)).clamp_max(1.0)
    for block in rows.values():
        block.mul_(factors.unsqueeze(1))
    return norms


def centred_bits(norms: Tensor, bound: float) -> Tensor:
    """Each client's centred unclipped bit from its update's norm: +1/2 within ``bound``, else -1/2."""
    return (norms <= bound).to(torch.float32) - 0.5


def next_clip(clip: float, unclipped_share: float, target_quantile: float, lr: float) -> float:
    """The adaptive clip after a round in which ``unclipped_share`` of the clients (noised) were not clipped."""
    return clip * math.exp(-lr * (unclipped_share - target_quantile))


def update_noise_multiplier(noise_multiplier: float, count_noise: float) -> float:
    """The update's noise multiplier beside a count of centred bits released with ``count_noise`` standard
    deviation (in clients), so that together they are a Gaussian mechanism of ``noise_multiplier``; a
    ValueError when the count's noise is too small to leave any budget for the update."""
    rest = noise_multiplier**-2 - (2 * count_noise) ** -2
    if rest <= 0:
        raise ValueError(
            f"privacy.adaptive.count_noise={count_noise} is too small for noise_multiplier={noise_multiplier}:"
            f" it must exceed {1 / (2 * noise_multiplier):.4g} clients"
        )
    return rest**-0.5
