"""Krum and multi-Krum (Blanchard et al., NeurIPS 2017): each update is scored by the sum of its squared
distances to its ``n - f - 2`` nearest other updates; Krum takes the best-scored update, multi-Krum the ``m``
best, averaged as the paper defines it (with ``weighted``, by their clients' weights, as Flower's ``Krum``
strategy does). With ``repeated``, multi-Krum is Krum applied again and again, each pick leaving the set and
the rest scored anew (El Mhamdi et al., ICML 2018, the selection inside Bulyan; the ``multi_krum`` of
Shejwalkar and Houmansadr's NDSS 2021 notebooks, which repeats while more than ``2f + 2`` updates remain, so
picks ``n - 2f - 2``). Defined for ``n >= 2f + 3``."""

from __future__ import annotations

from typing import ClassVar, Literal

import torch
from pydantic import Field, model_validator
from torch import Tensor

from fedsim.config.robust import GatheringConfig, register_aggregator
from fedsim.robust.aggregation import Rule
from fedsim.robust.gather import GatheredRows


def krum_scores(distances: Tensor, f: int) -> Tensor:
    """(n,) each row's sum of squared distances to its ``n - f - 2`` nearest others; ``distances`` (n, n)."""
    n = distances.shape[0]
    nearest = max(n - f - 2, 1)
    others = distances + torch.diag(torch.full((n,), float("inf"), dtype=distances.dtype, device=distances.device))
    return others.sort(dim=1).values[:, :nearest].sum(1)


def krum_selection(distances: Tensor, f: int, m: int) -> list[int]:
    """The ``m`` best-scored rows, best first (ties to the lower index)."""
    scores = krum_scores(distances, f)
    return sorted(range(distances.shape[0]), key=lambda i: (float(scores[i]), i))[:m]


def repeated_krum_selection(distances: Tensor, f: int, m: int) -> list[int]:
    """The ``m`` rows Krum picks one after another, in the order picked: each pick leaves the set and Krum's
    scores are taken again over the rows that remain (their ``len(remaining) - f - 2`` nearest others)."""
    remaining = list(range(distances.shape[0]))
    picked: list[int] = []
    for _ in range(m):
        best = remaining[krum_selection(distances[remaining][:, remaining], f, 1)[0]]
        picked.append(best)
        remaining.remove(best)
    return picked


def multi_krum_picks(n: int, f: int, selected: int | None, repeated: bool) -> int:
    """How many of ``n`` updates multi-Krum averages: ``selected``, else ``n - f`` (Blanchard et al.'s m best)
    or, ``repeated``, ``n - 2f - 2`` (Krum applied again while it is defined, more than ``2f + 2`` left)."""
    if selected is not None:
        return selected
    return max(n - 2 * f - 2, 1) if repeated else n - f


def multi_krum_selection(distances: Tensor, f: int, m: int, repeated: bool = False) -> list[int]:
    """The rows multi-Krum averages: the ``m`` best by one scoring, or ``repeated``, ``m`` successive Krum picks."""
    return repeated_krum_selection(distances, f, m) if repeated else krum_selection(distances, f, m)


def multi_krum(rows: GatheredRows, f: int, m: int, weighted: bool = False, repeated: bool = False) -> Tensor:
    chosen = torch.tensor(multi_krum_selection(rows.squared_distances(), f, m, repeated), device=rows.device)
    weights = rows.weights[chosen] if weighted else torch.ones(len(chosen), device=rows.device)
    out = torch.empty(rows.rows.shape[1], device=rows.device)
    for lo, hi, block in rows.blocks():
        out[lo:hi] = weights @ block[chosen] / weights.sum()
    return out


class ByzantineConfig(GatheringConfig):
    """A rule defined for a number ``byzantine`` of attackers it assumes, at least ``2f + 3`` clients a round."""

    byzantine: int = Field(0, ge=0, description="how many attackers the rule assumes")
    assumes_minority: ClassVar[bool] = True
    least_formula: ClassVar[str] = "2f + 3"

    def least_cohort(self) -> int:
        return 2 * self.byzantine + 3

    def tolerated(self, cohort: int) -> int:
        return self.byzantine

    def tolerance_setting(self) -> str:
        return f"aggregator.byzantine={self.byzantine}; raise it"

    def cohort_refusal(self, cohort: int, fixed: bool) -> str | None:
        least = self.least_cohort()
        if fixed and cohort < least:
            return (
                f"aggregator.kind={self.kind} with byzantine={self.byzantine} needs {least} or more clients a round"
                f" (n >= {self.least_formula}); the cohort is {cohort}"
            )
        return None


class KrumConfig(ByzantineConfig):
    """``krum``: the update whose summed squared distance to its ``n - byzantine - 2`` nearest others is least."""

    kind: Literal["krum"] = "krum"


class MultiKrumConfig(ByzantineConfig):
    """``multi_krum``: the ``selected`` best-scored updates by Krum's score, averaged (``weighted``: with their
    clients' weights); ``repeated``: the ``selected`` successive picks of Krum over what remains."""

    kind: Literal["multi_krum"] = "multi_krum"
    selected: int | None = Field(
        None, ge=1, description="updates averaged; default n - byzantine, or n - 2 byzantine - 2 when repeated"
    )
    repeated: bool = Field(False, description="Krum picks one after another, the rest scored anew each time")
    weighted: bool = Field(False, description="weigh the selected updates by their clients' weights")

    @model_validator(mode="after")
    def _not_the_mean(self) -> MultiKrumConfig:
        if self.byzantine == 0 and self.selected is None and not self.repeated:
            raise ValueError(
                "kind=multi_krum with byzantine=0 averages all n - 0 updates: the mean; set aggregator.byzantine"
                " (the attackers a round it assumes) or aggregator.selected"
            )
        return self

    def cohort_refusal(self, cohort: int, fixed: bool) -> str | None:
        if (refusal := super().cohort_refusal(cohort, fixed)) is not None:
            return refusal
        if self.selected is not None and self.selected > cohort:
            return f"aggregator.selected={self.selected} exceeds the cohort ({cohort} clients)"
        if fixed and self.selected == cohort:  # (byzantine 0 without selected: refused with the settings)
            return f"aggregator.kind=multi_krum averages all {cohort} updates of every round: the mean"
        return None


@register_aggregator(KrumConfig)
class Krum(Rule):
    cfg: KrumConfig

    def aggregate(self, rows: GatheredRows) -> Tensor:
        return multi_krum(rows, self.cfg.byzantine, 1)


@register_aggregator(MultiKrumConfig)
class MultiKrum(Rule):
    cfg: MultiKrumConfig

    def aggregate(self, rows: GatheredRows) -> Tensor:
        cfg = self.cfg
        picks = multi_krum_picks(rows.n, cfg.byzantine, cfg.selected, cfg.repeated)
        return multi_krum(rows, cfg.byzantine, picks, cfg.weighted, cfg.repeated)
