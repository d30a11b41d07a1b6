"""A sweep (``fedsim sweep GRID.yaml``): a grid of runs on one pool of emulated device types, placed by Gavel."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, JsonValue, model_validator

from fedsim.config.base import RunName, Strict

MAX_RUNS = 1000


class SweepConfig(Strict):
    """``base`` (a run YAML, relative to the sweep file) with ``run`` laid over it, then one run per point of
    ``grid`` (dotted keys -> lists of values; the cartesian product). The pool has ``types`` of devices (name ->
    count); ``speed[model kind][type]`` is how fast that type trains that model relative to this host (1: as
    measured here; a kind or type not listed: 1), which is where heterogeneity comes from. ``policy`` places
    runs: Gavel's ``min_makespan`` or ``max_min_fairness`` allocation with its round-based mechanism (scheduling
    rounds of ``round_s`` virtual seconds), or the heterogeneity-agnostic ``lpt``. Each run's seconds per round
    on this host are measured over ``measure_rounds`` rounds of a throwaway copy of it."""

    name: RunName = Field("sweep", description="the sweep's name (its output directory's)")
    base: Path | None = Field(None, description="the run YAML every point starts from, relative to the sweep file")
    run: dict[str, JsonValue] = Field(default_factory=dict, description="settings laid over the base for every run")
    grid: dict[str, list[JsonValue]] = Field(
        default_factory=dict, description="dotted keys to lists of values: one run per point of their product"
    )
    types: dict[str, int] = Field(
        default_factory=lambda: {"host": 1}, description="the pool's device types and how many of each"
    )
    speed: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="how fast each device type trains each model kind, relative to the others (empty: measured)",
    )
    policy: Literal["min_makespan", "max_min_fairness", "lpt"] = Field(
        "min_makespan", description="how runs share the devices: Gavel's min_makespan or max_min_fairness, or lpt"
    )
    round_s: float = Field(30.0, gt=0, description="virtual seconds per scheduling round")
    measure_rounds: int = Field(
        2, ge=1, le=100, description="rounds each run is timed for on each device type when speed is not given"
    )

    @model_validator(mode="after")
    def _grid_and_pool_fit(self) -> SweepConfig:
        size = math.prod(len(v) for v in self.grid.values())
        if any(not values for values in self.grid.values()):
            raise ValueError("grid: every key needs at least one value")
        if size > MAX_RUNS:
            raise ValueError(f"grid: {size} runs; a sweep holds at most {MAX_RUNS}")
        if not self.types or any(n < 1 or n > 10_000 for n in self.types.values()):
            raise ValueError("types: each device type needs a count from 1 to 10000")
        for kind, speeds in self.speed.items():
            for device, factor in speeds.items():
                if device not in self.types:
                    raise ValueError(f"speed.{kind}.{device}: no device type {device!r} in types")
                if not factor > 0:
                    raise ValueError(f"speed.{kind}.{device}: must be positive, got {factor}")
        return self

    def factor(self, model_kind: str, device: str) -> float:
        return self.speed.get(model_kind, {}).get(device, 1.0)

    def grid_points(self) -> list[dict[str, Any]]:
        """Every point of the grid, as {dotted key: value}, in row-major order of the keys as written."""
        points: list[dict[str, Any]] = [{}]
        for key, values in self.grid.items():
            points = [{**p, key: v} for p in points for v in values]
        return points
