"""Uniform selection: today's cohorts, bit for bit (:func:`fedsim.sim.rounds.cohort.sample_cohort`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import Tensor

from fedsim.config import register_selector
from fedsim.config.selection import UniformSelection
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.rounds.cohort import sample_cohort
from fedsim.sim.selection.base import SelectionContext


@register_selector(UniformSelection)
class Uniform:
    """A uniform draw of the reachable clients (fixed-size, or Poisson with ``sampling: poisson``); it keeps
    no state, so its cohorts depend on the seed and the round alone."""

    def __init__(self, cfg: UniformSelection, context: SelectionContext) -> None:
        self.cfg, self.context = cfg, context

    def select(self, r: int) -> list[int]:
        c = self.context
        return sample_cohort(c.seed, r, c.population, c.cohort, c.availability, c.sampling)

    def observe(self, r: int, records: Sequence[ClientRecord]) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        return {}

    def tensors(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        pass
