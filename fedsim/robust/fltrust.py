"""FLTrust (Cao et al., NDSS 2021): the server trains its own update ``g0`` on a small clean root set each round
(:mod:`fedsim.robust.root`); each client's update ``g_i`` gets the trust score ``TS_i = ReLU(cos(g_i, g0))``
and is rescaled to ``g0``'s length, and the aggregate is ``sum_i TS_i ||g0|| / ||g_i|| g_i / sum_i TS_i``: an
update pointing away from the server's counts nothing, and no update can weigh more by being long. When no
update scores above 0 the aggregate is 0 (the model stays). Unweighted by the clients' samples, as the paper."""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.config.robust import GatheringConfig, register_aggregator
from fedsim.robust.aggregation import Rule
from fedsim.robust.gather import GatheredRows


def fltrust(rows: GatheredRows, reference: Tensor) -> Tensor:
    """The trust-weighted, length-normalised mean of the gathered rows around the server's ``reference``."""
    g0 = reference.double()
    dots = torch.zeros(rows.n, dtype=torch.float64, device=rows.device)
    square = torch.zeros(rows.n, dtype=torch.float64, device=rows.device)
    for lo, hi, block in rows.blocks():
        b = block.double()
        dots += b @ g0[lo:hi]
        square += (b * b).sum(1)
    norms, g0_norm = square.sqrt(), g0.norm()
    trust = (dots / (norms * g0_norm).clamp_min(1e-30)).clamp_min(0)
    out = torch.zeros(rows.rows.shape[1], device=rows.device)
    if float(trust.sum()) == 0:
        return out
    coefficients = trust * g0_norm / norms.clamp_min(1e-30) / trust.sum()
    for lo, hi, block in rows.blocks():
        out[lo:hi] = (coefficients @ block.double()).float()
    return out


class FlTrustConfig(GatheringConfig):
    """``fltrust``: trust scores against the server's update on ``root_samples`` clean training samples."""

    kind: Literal["fltrust"] = "fltrust"
    root_samples: int = Field(100, ge=1, le=1_000_000, description="the server's clean samples")
    trains_root: ClassVar[bool] = True


@register_aggregator(FlTrustConfig)
class FlTrust(Rule):
    cfg: FlTrustConfig

    def aggregate(self, rows: GatheredRows) -> Tensor:
        if self.view.reference is None:
            raise RuntimeError("aggregator.kind=fltrust aggregates with the server's root update: none was trained")
        return fltrust(rows, self.view.reference)
