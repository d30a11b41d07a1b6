"""The rules that act on each client's update before the usual weighted sum, so the round keeps its one
all-reduce: norm bounding (Sun et al. 2019: an update longer than ``bound`` is scaled down to it) and centered
clipping (Karimireddy et al., ICML 2021: an update's difference from the previous round's aggregate ``centre``
is clipped to ``radius``; one iteration a round, as the paper runs it with momentum)."""

from __future__ import annotations

from torch import Tensor


def norm_bound_(rows: Tensor, bound: float) -> None:
    """Scale each row of ``rows`` (K, numel) to L2 norm at most ``bound``, in place."""
    norms = rows.norm(dim=1, keepdim=True)
    rows.mul_((bound / norms.clamp_min(1e-30)).clamp_max_(1.0))


def centered_clip_(rows: Tensor, centre: Tensor, radius: float) -> None:
    """Replace each row ``x`` by ``centre + clip(x - centre, radius)``, in place."""
    rows.sub_(centre)
    norm_bound_(rows, radius)
    rows.add_(centre)
