"""The built-in aggregation rules, registered when this module is imported (by :data:`AGGREGATORS` the first
time a run names a rule): the weighted mean and the robust rules of :mod:`fedsim.robust`."""

from __future__ import annotations

import torch

from fedsim.config.robust import MeanConfig, register_aggregator
from fedsim.robust import bulyan, clipping, dnc, flame, fltrust, geometric_median, krum, median, trimmed_mean

# each registers its own rules
BUILT_IN = (bulyan, clipping, dnc, flame, fltrust, geometric_median, krum, median, trimmed_mean)


@register_aggregator(MeanConfig)
def mean(cfg: MeanConfig, numel: int, device: torch.device) -> None:
    """The weighted mean is the round's plain sum: no stage."""
    return None
