"""Power-of-choice selection (Cho, Wang and Joshi, "Towards understanding biased client selection in
federated learning", AISTATS 2022; arXiv 2010.01243).

Each round the server draws a candidate set A of ``d`` clients without replacement, client k with probability
p_k, its share of the training samples, and keeps the ``m`` (the cohort) of highest local loss, ties broken
at random. The draw is successive sampling: numpy's ``Generator.choice(replace=False, p=...)`` draws from p
with the clients already drawn left out, the draw the authors' code (``np.random.choice(K, p=p_k, size=d,
replace=False)``, util_v4.sel_client) and Flower's baseline (strategy.sample_clients) make. Only the clients
reachable this round (``emulation.availability``) or online now (the trace clock) are drawn, p renormalised
over them, as the authors' intermittent-availability variant (pow-dint) does; a client without samples has
p_k = 0 and is never drawn. ``candidates_by: uniform`` draws the d uniformly instead (fedsim's draw before).

The loss ranked is the paper's variant: pow-d, each candidate's mean loss of the current global model on all
its local data; cpow-d, the same on a mini-batch of b samples (both computed by the engine's probe,
:class:`fedsim.sim.rounds.candidate_loss.CandidateLoss`); rpow-d, the mean training loss each client last
reported (:class:`~fedsim.sim.selection.base.ClientReports`), free of extra communication and computation, a
client never heard from ranking above every other (the authors set its value to infinity). Every draw comes
from a stream keyed by the seed and the round, so ranks and a resumed run choose alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from torch import Tensor

from fedsim.config import ConfigError, register_selector
from fedsim.config.selection import PowerOfChoiceSelection
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.rounds.cohort import reachable, sample_cohort
from fedsim.sim.selection.base import ClientReports, SelectionContext

_TIES = 0x706F77  # the key of the stream that orders tied candidates
_CANDIDATES = 0x706F6364  # the key of the stream that draws uniform candidates among the clients online
_BY_SIZE = 0x706F6B  # the key of the stream that draws the candidates in proportion to their samples


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
        self._samples: np.ndarray | None = None  # each client's training samples, read once when first drawn
        if cfg.variant != "rpow-d" and context.loss is None:
            raise ConfigError(
                f"selection.variant={cfg.variant} has the candidates score the current model, and this run hands"
                " the selector no loss probe (SelectionContext.loss); use variant: rpow-d"
            )

    def select(self, r: int) -> list[int]:
        c = self.context
        candidates = self.draw(r)
        order = np.random.default_rng([c.seed, r, _TIES]).permutation(len(candidates))
        return highest_loss(candidates, self.losses(r, candidates), c.cohort, order)

    def draw(self, r: int) -> list[int]:
        """Round ``r``'s candidate set, sorted: ``d`` of the clients reachable (or online), in proportion to their
        samples without replacement, or uniformly; all of them when fewer are."""
        c = self.context
        if self.cfg.candidates_by == "uniform":
            if c.online is None:
                return sample_cohort(c.seed, r, c.population, self.candidates, c.availability)
            online = c.online()  # on the trace clock: d of the clients online now
            drawn = np.random.default_rng([c.seed, r, _CANDIDATES]).choice(
                online, size=min(self.candidates, len(online)), replace=False
            )
            return sorted(int(cid) for cid in drawn)
        if c.online is not None:
            eligible = c.online()
        else:
            eligible = np.arange(c.population, dtype=np.int64)
            if c.availability < 1.0:
                eligible = eligible[reachable(c.seed, r, eligible, c.availability)]
        weights = self.samples()[eligible]
        eligible, weights = eligible[weights > 0], weights[weights > 0]
        size = min(self.candidates, len(eligible))
        rng = np.random.default_rng([c.seed, r, _BY_SIZE])
        drawn = rng.choice(eligible, size=size, replace=False, p=weights / weights.sum()) if size else eligible
        return sorted(int(cid) for cid in drawn)

    def samples(self) -> np.ndarray:
        """Each client's training samples, the weights of the draw (p_k up to the normalisation)."""
        if self._samples is None:
            c = self.context
            if c.samples is None:
                raise ConfigError("selection.candidates_by=size reads each client's samples, which it was not given")
            self._samples = np.array([c.samples(cid) for cid in range(c.population)], dtype=np.float64)
        return self._samples

    def losses(self, r: int, candidates: list[int]) -> np.ndarray:
        """The loss each candidate is ranked by: the variant's."""
        variant, probe = self.cfg.variant, self.context.loss
        if variant == "rpow-d" or probe is None:  # None only under rpow-d: the builder refuses the others
            return self.reports.losses(candidates)
        return probe(r, candidates, self.cfg.minibatch if variant == "cpow-d" else None)

    def observe(self, r: int, records: Sequence[ClientRecord]) -> None:
        if self.cfg.variant == "rpow-d":  # pow-d and cpow-d read the candidates' losses afresh every round
            self.reports.observe(r, records)

    def state_dict(self) -> dict[str, Any]:
        return {"reported": len(self.reports.loss)}

    def tensors(self) -> dict[str, Tensor]:
        return self.reports.tensors()

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        self.reports.load(tensors)
