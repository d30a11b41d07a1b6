"""What a client selector is, and what it may read of the clients.

A selector chooses round ``r``'s cohort (:meth:`Selector.select`), sorted, the same on every rank: it reads
only the run's seed, the round and what every rank has seen, the reports of the clients that trained in
earlier rounds (:class:`ClientReports`: each one's last training loss, how many rounds it trained, the last
one), and, where it declares ``evaluates_model``, its candidates' loss of the current model as every rank
computes it alike (``SelectionContext.loss``). After each round every rank hands it the round's records,
gathered from all ranks (:meth:`Selector.observe`); a checkpoint keeps its state (``state_dict``/``tensors``,
restored by ``load_state_dict``), so a resumed run chooses what the uninterrupted one would.

Your own selector registers its settings class (a subclass of :class:`fedsim.config.SelectionConfig`) and
its builder with ``@register_selector(YourSettings)``; the builder is called with the settings and a
:class:`SelectionContext`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

from fedsim.config import SelectionConfig
from fedsim.sim.executors.base import ClientRecord

CandidateLoss = Callable[[int, Sequence[int], int | None], np.ndarray]


@dataclass(frozen=True)
class SelectionContext:
    """The population a selector chooses from: ``population`` clients, ``cohort`` a round, each reachable
    with probability ``availability`` in a round (keyed by the seed), drawn by ``sampling``; for a selector
    that reads them, each client's ``samples`` and its task's ``duration`` in seconds on the run's trace.
    ``online``, on the trace clock, gives the clients online and idle as the round starts (sorted ids): the
    filter every selector applies before it chooses (None: the measured clock, where every client is).
    ``loss(r, cids, batch)``, for a selector that declares ``evaluates_model``: each of ``cids``' mean loss of
    the current global model on its data in round ``r``, all of it (``batch`` None) or a mini-batch of
    ``batch`` samples, float64, the same on every rank (the ledger charges the messages)."""

    seed: int
    population: int
    cohort: int
    availability: float = 1.0
    sampling: str = "fixed"
    samples: Callable[[int], int] | None = None
    duration: Callable[[int], float] | None = None
    online: Callable[[], np.ndarray] | None = None
    loss: CandidateLoss | None = None


class ClientReports:
    """What the clients that trained reported, by client: the mean training loss of the last round each
    trained, the rounds it trained, and the last of them. Only clients that trained take memory."""

    def __init__(self) -> None:
        self.loss: dict[int, float] = {}
        self.rounds: dict[int, int] = {}
        self.last: dict[int, int] = {}

    def observe(self, r: int, records: Sequence[ClientRecord]) -> None:
        for rec in records:
            self.loss[rec.cid] = float(rec.loss)
            self.rounds[rec.cid] = self.rounds.get(rec.cid, 0) + 1
            self.last[rec.cid] = r

    def tensors(self) -> dict[str, Tensor]:
        cids = sorted(self.loss)
        return {
            "cids": torch.tensor(cids, dtype=torch.int64, device="cpu"),
            "loss": torch.tensor([self.loss[c] for c in cids], dtype=torch.float64, device="cpu"),
            "rounds": torch.tensor([self.rounds[c] for c in cids], dtype=torch.int64, device="cpu"),
            "last": torch.tensor([self.last[c] for c in cids], dtype=torch.int64, device="cpu"),
        }

    def load(self, tensors: Mapping[str, Tensor]) -> None:
        """The reports :meth:`tensors` saved; none when the checkpoint holds none (its selector kept none)."""
        if "cids" not in tensors:
            self.loss, self.rounds, self.last = {}, {}, {}
            return
        cids = tensors["cids"].tolist()
        self.loss = dict(zip(cids, tensors["loss"].tolist(), strict=True))
        self.rounds = dict(zip(cids, tensors["rounds"].tolist(), strict=True))
        self.last = dict(zip(cids, tensors["last"].tolist(), strict=True))

    def losses(self, cids: Sequence[int]) -> np.ndarray:
        """Each client's last reported loss; +inf for one that has not trained."""
        return np.array([self.loss.get(c, np.inf) for c in cids], dtype=np.float64)


class Selector(Protocol):
    def select(self, r: int) -> list[int]:
        """Round ``r``'s cohort, sorted, the same on every rank."""
        ...

    def observe(self, r: int, records: Sequence[ClientRecord]) -> None:
        """Round ``r``'s records, from every rank."""
        ...

    def state_dict(self) -> dict[str, Any]: ...

    def tensors(self) -> dict[str, Tensor]: ...

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None: ...


def told(cfg: SelectionConfig, records: Sequence[ClientRecord]) -> Sequence[ClientRecord]:
    """The round's records as the selector may read them: whole where it declares ``reads_clients``; otherwise
    who trained, where and when, with what their data said (loss, sizes) blanked (NaN, 0), so nothing a
    selector keeps, in memory or in a checkpoint, holds a statistic it declared it does not read. Their losses
    are screened where ``selection.loss_screen`` asks (:class:`fedsim.sim.selection.screen.Screened`)."""
    if cfg.reads_clients:
        return records
    return [replace(rec, loss=math.nan, size=0, samples=0) for rec in records]
