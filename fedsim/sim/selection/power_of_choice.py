"""Power-of-choice selection (Cho, Wang and Joshi, "Towards understanding biased client selection in
federated learning", AISTATS 2022).

Each round draws ``d`` candidates uniformly (of the clients reachable), then keeps the ``m`` (the cohort) with
the highest local loss. The paper's pow-d has each candidate compute its loss on the current model; its
rpow-d, which costs no extra communication or computation, uses the loss each client last reported, and that
is what this selector reads (:class:`~fedsim.sim.selection.base.ClientReports`). A client that has not
trained yet has no loss and ranks above every other (so every client is heard from), and ties are broken by
a uniformly random order keyed by the seed and the round. Biasing the cohort toward high-loss clients speeds
up convergence under label skew, at a bias the paper bounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from torch import Tensor

from fedsim.config import register_selector
from fedsim.config.selection import PowerOfChoiceSelection
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.rounds.cohort import sample_cohort
from fedsim.sim.selection.base import ClientReports, SelectionContext

_TIES = 0x706F77  # the key of the stream that orders tied candidates
_CANDIDATES = 0x706F6364  # the key of the stream that draws the candidates among the clients online


def highest_loss(candidates: Sequence[int], losses: np.ndarray, keep: int, order: np.ndarray) -> list[int]:
    """The ``keep`` candidates of highest loss, sorted by id; among equal losses, the earlier in ``order`` (a
    permutation of the candidates' positions) first."""
    rank = np.empty(len(candidates), dtype=np.int64)
    rank[order] = np.arange(len(candidates))
    chosen = np.lexsort((rank, -losses))[:keep]  # by loss, highest first, then by the random order
    return sorted(int(candidates[i]) for i in chosen)


@register_selector(PowerOfChoiceSelection)
class PowerOfChoice:
    def __init__(self, cfg: PowerOfChoiceSelection, context: SelectionContext) -> None:
        self.cfg, self.context = cfg, context
        self.reports = ClientReports()
        self.candidates = cfg.candidates_for(context.cohort, context.population)

    def select(self, r: int) -> list[int]:
        c = self.context
        if c.online is None:
            candidates = sample_cohort(c.seed, r, c.population, self.candidates, c.availability)
        else:  # on the trace clock: d of the clients online now, uniformly (all of them when fewer are)
            online = c.online()
            drawn = np.random.default_rng([c.seed, r, _CANDIDATES]).choice(
                online, size=min(self.candidates, len(online)), replace=False
            )
            candidates = sorted(int(cid) for cid in drawn)
        order = np.random.default_rng([c.seed, r, _TIES]).permutation(len(candidates))
        return highest_loss(candidates, self.reports.losses(candidates), c.cohort, order)

    def observe(self, r: int, records: Sequence[ClientRecord]) -> None:
        self.reports.observe(r, records)

    def state_dict(self) -> dict[str, Any]:
        return {"reported": len(self.reports.loss)}

    def tensors(self) -> dict[str, Tensor]:
        return self.reports.tensors()

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        self.reports.load(tensors)
