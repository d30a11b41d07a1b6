"""How the server combines the clients' updates (``aggregator:``): the weighted mean, or a robust rule."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedsim.config.base import Strict

# rules that need every update of the round at once (the round gathers them instead of summing)
GATHERED = ("median", "trimmed_mean", "krum", "multi_krum", "bulyan", "geometric_median")
# rules that transform each client's update before the usual weighted sum
PER_CLIENT = ("norm_bound", "centered_clip")


class AggregatorConfig(Strict):
    """The server's aggregation rule over the round's client updates.

    ``mean``: the weighted mean (FedAvg). ``median``: coordinate-wise median (Yin et al. 2018).
    ``trimmed_mean``: coordinate-wise, the ``trim`` fraction of largest and of smallest values dropped, the rest
    averaged with their clients' weights (Yin et al.). ``krum`` / ``multi_krum``: the update(s) whose summed
    squared distance to their ``n - byzantine - 2`` nearest others is least, ``selected`` of them averaged
    (Blanchard et al. 2017). ``bulyan``: ``n - 2 byzantine`` updates chosen by Krum one after another, then
    coordinate-wise the mean of the ``n - 4 byzantine`` values nearest their median (El Mhamdi et al. 2018).
    ``geometric_median``: smoothed Weiszfeld, ``iterations`` steps from the weighted mean (RFA, Pillutla et al.
    2019). ``norm_bound``: each update scaled to L2 norm at most ``bound``, then the mean (Sun et al. 2019).
    ``centered_clip``: each update's difference from the previous round's aggregate clipped to ``radius``, then
    the mean (Karimireddy et al. 2021, one iteration a round). Server optimisers (FedAvgM, FedAdam) apply to
    the result. Gathered updates stay in memory up to ``memory_mb`` and go to a memory-mapped file past it.
    """

    kind: Literal[
        "mean", "median", "trimmed_mean", "krum", "multi_krum", "bulyan", "geometric_median", "norm_bound",
        "centered_clip",
    ] = "mean"  # fmt: skip
    trim: float = Field(0.1, ge=0, lt=0.5, description="trimmed_mean: fraction dropped from each end")
    byzantine: int = Field(0, ge=0, description="krum, multi_krum, bulyan: how many attackers the rule assumes")
    selected: int | None = Field(None, ge=1, description="multi_krum: updates averaged; default n - byzantine")
    iterations: int = Field(8, ge=1, le=1000, description="geometric_median: Weiszfeld steps")
    smoothing: float = Field(1e-6, gt=0, le=1, description="geometric_median: least distance (nu)")
    bound: float = Field(1.0, gt=0, le=1e6, description="norm_bound: largest L2 norm of an update")
    radius: float = Field(1.0, gt=0, le=1e6, description="centered_clip: largest distance from the centre")
    memory_mb: float = Field(512.0, gt=0, le=1e7, description="gathered updates in memory before spilling")

    @property
    def gathered(self) -> bool:
        return self.kind in GATHERED

    def least_cohort(self) -> int:
        """The fewest updates the rule is defined for, given ``byzantine``."""
        f = self.byzantine
        if self.kind in ("krum", "multi_krum"):
            return 2 * f + 3
        if self.kind == "bulyan":
            return 4 * f + 3
        return 1
