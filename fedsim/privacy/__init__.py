"""What a run keeps private: differential privacy of the clients' updates (clipping, noise, the accountant) and
secure aggregation of their sum (SecAgg+).

Importing this package loads nothing heavy: dp-accounting takes about a second to import and the cryptography
libraries a tenth of one, so only a run that asks for privacy loads :mod:`fedsim.privacy.dp` (through
:func:`build_privacy`) or :mod:`fedsim.privacy.secagg` (through :func:`build_secagg`).
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch

from fedsim.algorithms import one_update_per_client
from fedsim.config import AlgorithmConfig, PrivacyConfig, SecAggConfig
from fedsim.config.privacy import PRIVACY
from fedsim.privacy.context import PrivacyContext

if TYPE_CHECKING:
    from fedsim.privacy.dp import DifferentialPrivacy
    from fedsim.privacy.secagg import SecAggPlus

__all__ = ["build_privacy", "build_secagg"]


def build_privacy(
    settings: PrivacyConfig,
    algorithm: str,
    context: PrivacyContext,
    sums: Mapping[str, int],
    initial: torch.Tensor | None = None,
) -> DifferentialPrivacy | None:
    """The run's DP stage, or None without ``privacy``; an algorithm (``algorithm``: its kind) summing ``sums``
    that DP cannot keep private (clipping one update does not bound what its client reveals) is refused with the
    reason. ``initial`` is the model before round 0, which an audit compares the final one with."""
    if not settings.enabled:
        return None
    one_update_per_client("privacy", algorithm, sums)
    stage: DifferentialPrivacy = PRIVACY.build(settings, context, initial)
    return stage


def noise_key(privacy: PrivacyConfig, seed: int, broadcast: Callable[[int], int], announce: bool) -> int | None:
    """The key of DP's noise streams: None (the run's seed: a replayable run), or under ``noise_seed: system`` a
    63-bit secret from the operating system, rank 0's broadcast to every rank (they add the same noise), said
    once on stderr (``announce``) because the run can then not be replayed."""
    if not privacy.enabled or privacy.noise_seed == "run":
        return None
    if announce:
        print(
            "fedsim: privacy.noise_seed=system: the noise comes from a secret the operating system drew, not the"
            " seed; this run cannot be replayed, and a resumed one draws a new secret",
            file=sys.stderr,
            flush=True,
        )
    return int(broadcast(secrets.randbits(63)))


def build_secagg(
    settings: SecAggConfig,
    privacy: DifferentialPrivacy | None,
    algorithm: AlgorithmConfig,
    seed: int,
    sums: Mapping[str, int],
    device: torch.device,
    root: bool,
) -> SecAggPlus | None:
    """The run's SecAgg+ stage on ``device``, or None without ``secagg``; ``root`` announces failed rounds. Its
    max weight is 1 when every client weighs 1 (under DP, or ``weighting: uniform``), and its dequantized bound
    is checked against DP's clip, whose noise then covers how far past the clip a dequantized message reaches."""
    if not settings.enabled:
        return None
    from fedsim.privacy.secagg import SecAggPlus, check_dequantized_bound, secagg_max_weight

    one_update_per_client("secagg", algorithm.kind, sums)
    max_weight = secagg_max_weight(settings, privacy is not None or algorithm.weighting == "uniform")
    check_dequantized_bound(settings, privacy.clip if privacy is not None else None, sums["delta"], max_weight)
    secagg = SecAggPlus(settings, seed, max_weight, sums["delta"], device, root)
    if privacy is not None:
        privacy.cover_slack(secagg.slack)
        secagg.withheld = privacy.stored_statistics == "withheld"  # its error measures the un-noised sum
    return secagg
