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
    weighing its class's samples over those chosen."""

    kind: Literal["none", "craig", "random"] = "none"
    fraction: float = Field(0.3, gt=0, le=1, description="craig: share of a client's samples it trains on")
    every: int = Field(5, ge=1, le=1_000_000, description="craig: a client's turns on one subset")

    @property
    def enabled(self) -> bool:
        return self.kind != "none"
