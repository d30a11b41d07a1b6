"""Bulyan (El Mhamdi et al., ICML 2018): Krum picks ``theta = n - 2f`` updates one after another (each pick
leaves the set, the scores are taken again over what remains); then at each coordinate the ``beta = theta - 2f``
picked values nearest their median are averaged. Defined for ``n >= 4f + 3``."""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from torch import Tensor

from fedsim.config.robust import register_aggregator
from fedsim.robust.aggregation import Rule
from fedsim.robust.gather import GatheredRows
from fedsim.robust.krum import ByzantineConfig, repeated_krum_selection


def bulyan_selection(distances: Tensor, f: int) -> list[int]:
    """The ``n - 2f`` rows Krum picks one after another, in the order picked."""
    return repeated_krum_selection(distances, f, distances.shape[0] - 2 * f)


def bulyan(rows: GatheredRows, f: int) -> Tensor:
    picked = torch.tensor(bulyan_selection(rows.squared_distances(), f), device=rows.device)
    beta = len(picked) - 2 * f
    out = torch.empty(rows.rows.shape[1], device=rows.device)
    for lo, hi, block in rows.blocks():
        chosen = block[picked]
        ordered = chosen.sort(dim=0).values
        theta = chosen.shape[0]
        median = (ordered[(theta - 1) // 2] + ordered[theta // 2]) / 2
        nearest = (chosen - median).abs().argsort(dim=0, stable=True)[:beta]
        out[lo:hi] = chosen.gather(0, nearest).mean(0)
    return out


class BulyanConfig(ByzantineConfig):
    """``bulyan``: ``n - 2 byzantine`` updates chosen by Krum, then coordinate-wise the mean of the
    ``n - 4 byzantine`` values nearest their median; at least ``4f + 3`` clients a round."""

    kind: Literal["bulyan"] = "bulyan"
    least_formula: ClassVar[str] = "4f + 3"

    def least_cohort(self) -> int:
        return 4 * self.byzantine + 3


@register_aggregator(BulyanConfig)
class Bulyan(Rule):
    cfg: BulyanConfig

    def aggregate(self, rows: GatheredRows) -> Tensor:
        return bulyan(rows, self.cfg.byzantine)
