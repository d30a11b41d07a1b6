"""How the server combines the clients' updates (``aggregator:``): the weighted mean, or a registered rule.

A rule's settings class subclasses :class:`AggregatorConfig` with ``kind: Literal["..."]`` and declares what
the compatibility checks need: ``gathers`` (it needs every client's update at once, which SecAgg+ hides),
``per_client`` (it transforms each update the server decodes, before the usual weighted sum), ``keeps_clip``
(it never lengthens an update, so a DP clip before it still bounds what is summed), ``assumes_minority``
(it is defined for fewer than half attackers) and ``trains_root`` (the server trains an update of its own on a
root set of clean samples each round, FLTrust's); :meth:`AggregatorConfig.tolerated` says how many attackers
in a round the rule is built to withstand. The built-in rules are in :mod:`fedsim.robust.rules`;
:data:`AGGREGATORS` resolves ``aggregator.kind``.
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from fedsim.config.registry import Registry, StageConfig


class AggregatorConfig(StageConfig):
    """The server's aggregation rule over the round's client updates. Server optimisers (FedAvgM, FedAdam)
    apply to the rule's result."""

    gathers: ClassVar[bool] = False  # needs each client's update (the round gathers them instead of summing)
    per_client: ClassVar[bool] = False  # transforms each update the server decodes, then the weighted mean
    keeps_clip: ClassVar[bool] = False  # never lengthens an update: a DP clip before it still holds
    assumes_minority: ClassVar[bool] = False  # defined for fewer than half attackers
    trains_root: ClassVar[bool] = False  # the server trains its own update on a root set (FLTrust)

    @property
    def enabled(self) -> bool:
        """A rule replaces the weighted mean (``none``: the weighted mean, the registry's off value)."""
        return self.kind != "none"

    def least_cohort(self) -> int:
        """The fewest updates the rule is defined for."""
        return 1

    def tolerated(self, cohort: int) -> int | None:
        """The most attackers in a round of ``cohort`` updates the rule is built to withstand, or None for a rule
        that states no such number (the mean, norm bounding, FLTrust). By default, for a rule that
        ``assumes_minority``: fewer than half."""
        return (cohort - 1) // 2 if self.assumes_minority else None

    def tolerance_setting(self) -> str:
        """What sets :meth:`tolerated`, for a refusal to name: the setting to change."""
        return "fewer than half of a round"

    def cohort_refusal(self, cohort: int, fixed: bool) -> str | None:
        """Why rounds of ``cohort`` clients (exactly, when ``fixed``; else on average) are too small for the
        rule, or None."""
        least = self.least_cohort()
        if fixed and cohort < least:
            return f"aggregator.kind={self.kind} needs {least} or more clients a round; the cohort is {cohort}"
        return None


class GatheringConfig(AggregatorConfig):
    """A rule over every update of the round at once. Gathered updates stay in memory up to ``memory_mb`` and go
    to a memory-mapped file past it."""

    gathers: ClassVar[bool] = True
    memory_mb: float = Field(512.0, gt=0, le=1e7, description="gathered updates in memory before spilling")


class MeanConfig(AggregatorConfig):
    """``none``: no robust rule, the weighted mean (FedAvg)."""

    kind: Literal["none"] = "none"
    keeps_clip: ClassVar[bool] = True


AGGREGATORS = Registry[AggregatorConfig](
    "aggregator", AggregatorConfig, builtin="fedsim.robust.rules", default="none", decorator="register_aggregator"
)
register_aggregator = AGGREGATORS.register
