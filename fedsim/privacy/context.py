"""What a DP stage is built with beside its own settings (no dp-accounting: the registry imports this)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class PrivacyContext:
    """The run's seed, its population, the expected cohort and how it is drawn, its rounds (what a target
    epsilon is calibrated over), and whether to say what a slow calibration is doing."""

    seed: int
    population: int
    cohort: int
    sampling: Literal["fixed", "poisson"]
    rounds: int
    progress: bool = False
