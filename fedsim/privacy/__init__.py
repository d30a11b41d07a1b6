"""What a run keeps private: differential privacy of the clients' updates (clipping, noise, the accountant) and
secure aggregation of their sum (SecAgg+).

Importing this package loads nothing heavy: dp-accounting takes about a second to import and the cryptography
libraries a tenth of one, so only a run that asks for privacy loads :mod:`fedsim.privacy.dp` (through
:func:`build_privacy`) or :mod:`fedsim.privacy.secagg` (through :func:`build_secagg`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch

from fedsim.algorithms import one_update_per_client
from fedsim.config import RunConfig
from fedsim.config.privacy import PRIVACY
from fedsim.privacy.context import PrivacyContext

if TYPE_CHECKING:
    from fedsim.privacy.dp import DifferentialPrivacy
    from fedsim.privacy.secagg import SecAggPlus

__all__ = ["build_privacy", "build_secagg"]


def build_privacy(
    cfg: RunConfig, sums: Mapping[str, int], population: int, initial: torch.Tensor | None = None
) -> DifferentialPrivacy | None:
    """The run's DP stage, or None without ``privacy``; an algorithm summing ``sums`` that DP cannot keep
    private (clipping one update does not bound what its client reveals) is refused with the reason.
    ``initial`` is the model before round 0, which an audit compares the final one with."""
    if not cfg.privacy.enabled:
        return None
    one_update_per_client("privacy", cfg.algorithm.kind, sums)
    context = PrivacyContext(cfg.seed, population, cfg.cohort_size, cfg.sampling, cfg.rounds, cfg.progress)
    stage: DifferentialPrivacy = PRIVACY.build(cfg.privacy, context, initial)
    return stage


def build_secagg(cfg: RunConfig, sums: Mapping[str, int], device: torch.device, root: bool) -> SecAggPlus | None:
    """The run's SecAgg+ stage on ``device``, or None without ``secagg``; ``root`` announces failed rounds."""
    if not cfg.secagg.enabled:
        return None
    from fedsim.privacy.secagg import SecAggPlus, check_dequantized_bound, secagg_max_weight

    one_update_per_client("secagg", cfg.algorithm.kind, sums)
    max_weight = secagg_max_weight(cfg.secagg, cfg.privacy.enabled or cfg.algorithm.weighting == "uniform")
    clip = cfg.privacy.clip if cfg.privacy.enabled else None
    check_dequantized_bound(cfg.secagg, clip, sums["delta"], max_weight)
    return SecAggPlus(cfg.secagg, cfg.seed, max_weight, sums["delta"], device, root)
