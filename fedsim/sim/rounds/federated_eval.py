"""Federated evaluation: each of a round's clients scores the model on its own held-out data.

The global model is scored on every client's held-out split (and, for a personalised algorithm, the client's
personal model too); the task's headline metric per client (accuracy, perplexity, mse) is summarised across
clients as the mean and the 10th and 90th percentiles, the spread that a global test accuracy hides. Each rank
scores the clients it trained; every client's three sums stay on the device until one read per round.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
from torch import Tensor

from fedsim.data.holdout import LocalHoldout
from fedsim.models.replica import Replica
from fedsim.tasks import Task, evaluation_sums
from fedsim.tasks.evaluate import loaded_sums

PersonalState = Callable[[int], Tensor | None]  # client -> its personal flat model on the device, if any


def personal_models(algorithm: object, get_state: Callable[[int], object], enabled: bool) -> PersonalState | None:
    """Each client's personal model, for an algorithm that keeps one (Ditto's ``personal_model(state)``) when
    ``enabled``; ``get_state`` reads a client's state (the state store's ``get``)."""
    personal_model = getattr(algorithm, "personal_model", None)
    if personal_model is None or not enabled:
        return None

    def personal(cid: int) -> Tensor | None:
        model: Tensor | None = personal_model(get_state(cid))
        return model

    return personal


@dataclass(frozen=True)
class Spread:
    """A metric across clients: unweighted mean and the 10th/90th percentiles."""

    mean: float
    p10: float
    p90: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        v = np.asarray(values, dtype=np.float64)
        return cls(float(v.mean()), float(np.percentile(v, 10)), float(np.percentile(v, 90)))


@dataclass(frozen=True)
class ClientScore:
    cid: int
    value: float  # the global model's metric on the client's held-out data
    personal: float | None  # the client's personal model's, when it has one


def score_clients(
    replica: Replica,
    global_state: Tensor,
    data: LocalHoldout,
    cids: Sequence[int],
    task: Task,
    batch_size: int,
    personal: PersonalState | None = None,
) -> list[ClientScore]:
    """The task's metric of the global (and personal) model on each client's held-out data: one host read."""
    scored = [cid for cid in cids if data.held(data.inner.n_samples(cid)) > 0]
    if not scored:
        return []
    device = global_state.device
    held = {cid: data.heldout(cid) for cid in scored}
    replica.load_(global_state)  # the global model once for every client
    sums = [loaded_sums(replica, held[cid], batch_size, task) for cid in scored]
    nan = torch.full((3,), float("nan"), dtype=torch.float64, device=device)
    personal_rows = []
    for cid in scored:
        own = personal(cid) if personal is not None else None
        personal_rows.append(
            nan if own is None else evaluation_sums(replica, own.to(device), held[cid], batch_size, task)
        )
    values, personals = torch.stack([torch.stack(sums), torch.stack(personal_rows)]).cpu()
    out = []
    for cid, row, prow in zip(scored, values, personals, strict=True):
        mine = None if bool(torch.isnan(prow).any()) else task.result(prow).value
        out.append(ClientScore(cid, task.result(row).value, mine))
    return out


def summarize(scores: Sequence[ClientScore], metric: str) -> dict[str, float | int | str]:
    """The round's federated evaluation as the run store's metrics keep it."""
    if not scores:
        return {}
    summary: dict[str, float | int | str] = {"metric": metric, "clients": len(scores)}
    summary |= asdict(Spread.of([s.value for s in scores]))
    personal = [s.personal for s in scores if s.personal is not None]
    if personal:
        summary |= {f"personal_{k}": v for k, v in asdict(Spread.of(personal)).items()}
    return summary
