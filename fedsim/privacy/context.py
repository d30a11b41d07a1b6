"""What a DP stage is built with beside its own settings (no dp-accounting: the registry imports this)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class PrivacyContext:
    """The run's seed, its population, the expected cohort and how it is drawn, its rounds (what a target
    epsilon is calibrated over), whether to say what a slow calibration is doing, and the noise's key when it is
    not the seed. ``sampled`` is False where the trace clock, not a uniform sample of the population, decides
    who contributes to a release (its rounds, FedBuff's buffers): each release is then accounted with no
    amplification by sampling, and ``cohort`` is only the release's fixed denominator."""

    seed: int
    population: int
    cohort: int
    sampling: Literal["fixed", "poisson"]
    rounds: int
    progress: bool = False
    noise_key: int | None = None  # what keys the noise streams: the seed (None), or a secret (noise_seed: system)
    sampled: bool = True
