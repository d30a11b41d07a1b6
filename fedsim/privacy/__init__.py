"""What a run keeps private: differential privacy of the clients' updates (clipping, noise, the accountant).

Importing this package loads nothing heavy: dp-accounting takes about a second to import, so only a run that
asks for privacy loads :mod:`fedsim.privacy.dp` (through :func:`build_privacy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from fedsim.config import RunConfig

if TYPE_CHECKING:
    from fedsim.privacy.dp import DifferentialPrivacy

__all__ = ["build_privacy"]


def build_privacy(cfg: RunConfig, sums: Mapping[str, int], population: int) -> DifferentialPrivacy | None:
    """The run's DP stage, or None without ``privacy``; an algorithm summing ``sums`` that DP cannot keep
    private is refused with the reason (a ConfigError)."""
    if not cfg.privacy.enabled:
        return None
    from fedsim.privacy.dp import DifferentialPrivacy, private_algorithm

    private_algorithm(cfg.algorithm.name, sums)
    return DifferentialPrivacy(cfg, population)
