"""What each client trains on (``coreset:``): all its samples, or a CRAIG coreset of them."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from fedsim.config.base import Strict


class CoresetConfig(Strict):
    """``craig`` (Mirzasoleiman et al. 2020): each client trains on ``fraction`` of its samples, class by class,
    chosen by greedy facility location on their last-layer gradients at the global model and weighted by how
    many samples each stands for (the weights scale each sample's loss). A client chooses again after ``every``
    of its own turns; until then the subset (indices and weights) is client state in the store. ``random`` is
    the baseline: as many samples of each class drawn uniformly (from the client's seed for the round), each
    weighing its class's samples over those chosen.

    A subset epoch takes ``fraction`` of a full epoch's steps. To keep the full data's step count, lower
    ``algorithm.batch_size`` by the same factor: on MNIST (``bench/compressors.py``, docs/benchmarks.md) 30% in
    batches of 4 lost 0.74 points against 2.41 in batches of 16, for the same FLOPs (0.41x of the full data's),
    though not the same seconds on a CPU, where a small step's fixed costs dominate."""

    kind: Literal["none", "craig", "random"] = Field(
        "none", description="craig, random (a stratified uniform subset, CRAIG's baseline), or none: every sample"
    )
    fraction: float = Field(0.3, gt=0, le=1, description="craig: share of a client's samples it trains on")
    every: int = Field(5, ge=1, le=1_000_000, description="craig: a client's turns on one subset")

    @property
    def enabled(self) -> bool:
        return self.kind != "none"
