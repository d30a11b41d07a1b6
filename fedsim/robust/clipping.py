"""The rules that act on each client's update before the usual weighted sum, so the round keeps its one
all-reduce: norm bounding (Sun et al. 2019: an update longer than ``bound`` is scaled down to it) and centered
clipping (Karimireddy et al., ICML 2021: an update's difference from the previous round's aggregate ``centre``
is clipped to ``radius``; one iteration a round, as the paper runs it with momentum)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.config.robust import AggregatorConfig, register_aggregator
from fedsim.robust.aggregation import Rule


def norm_bound_(rows: Tensor, bound: float) -> None:
    """Scale each row of ``rows`` (K, numel) to L2 norm at most ``bound``, in place."""
    norms = rows.norm(dim=1, keepdim=True)
    rows.mul_((bound / norms.clamp_min(1e-30)).clamp_max_(1.0))


def centered_clip_(rows: Tensor, centre: Tensor, radius: float) -> None:
    """Replace each row ``x`` by ``centre + clip(x - centre, radius)``, in place."""
    rows.sub_(centre)
    norm_bound_(rows, radius)
    rows.add_(centre)


class NormBoundConfig(AggregatorConfig):
    """``norm_bound``: each update scaled to L2 norm at most ``bound``, then the mean."""

    kind: Literal["norm_bound"] = "norm_bound"
    bound: float = Field(1.0, gt=0, le=1e6, description="largest L2 norm of an update")
    per_client: ClassVar[bool] = True
    keeps_clip: ClassVar[bool] = True


class CenteredClipConfig(AggregatorConfig):
    """``centered_clip``: each update's difference from the previous round's aggregate clipped to ``radius``,
    then the mean (one iteration a round)."""

    kind: Literal["centered_clip"] = "centered_clip"
    radius: float = Field(1.0, gt=0, le=1e6, description="largest distance from the centre")
    per_client: ClassVar[bool] = True
    assumes_minority: ClassVar[bool] = True


@register_aggregator(NormBoundConfig)
class NormBound(Rule):
    cfg: NormBoundConfig

    def transform_(self, update: Tensor) -> None:
        norm_bound_(update, self.cfg.bound)


@register_aggregator(CenteredClipConfig)
class CenteredClip(Rule):
    cfg: CenteredClipConfig

    def __init__(self, cfg: CenteredClipConfig, numel: int, device: torch.device) -> None:
        super().__init__(cfg, numel, device)
        self.centre = torch.zeros(numel, device=device)  # the previous round's aggregate

    def transform_(self, update: Tensor) -> None:
        centered_clip_(update, self.centre, self.cfg.radius)

    def observe_(self, mean: Tensor) -> None:
        self.centre.copy_(mean)

    def tensors(self) -> dict[str, Tensor]:
        return {"robust.centre": self.centre}

    def load_tensors(self, tensors: Mapping[str, Tensor]) -> None:
        if "robust.centre" in tensors:
            self.centre.copy_(tensors["robust.centre"])
