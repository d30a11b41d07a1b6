"""A federated round's leader election (:mod:`fedsim.algorithms.fedlgd`), once the cohort's records are gathered.

Every rank elects the same leaders from the same gathered losses. A leader's model is in the state store of the
rank that trained it this round: that rank writes it into its row of one buffer, the others leave zeros, and one
all-reduce gives every rank every leader. Each elected client uploads its model once, charged to the ledger as
``leader`` traffic (their reports, a loss each, are the round's ordinary uploads).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor

from fedsim.algorithms.fedlgd import GLOBAL, FedLgd
from fedsim.comm.ledger import FLOAT32_BYTES, ByteLedger
from fedsim.sim.executors.base import ClientRecord
from fedsim.sim.runtime.pool import Pool
from fedsim.sim.state.state_store import StateStore


def leaders_of(algorithm: object) -> FedLgd | None:
    """The algorithm when it elects leaders (fedlgd), else None: a run builds the election only then."""
    return algorithm if isinstance(algorithm, FedLgd) else None


def elect_if_due(
    algorithm: FedLgd,
    r: int,
    records: Sequence[ClientRecord],
    mine: Sequence[tuple[int, int]],
    store: StateStore,
    pool: Pool,
    global_state: Tensor,
    ledger: ByteLedger,
) -> dict[str, int]:
    """Elect round ``r``'s leaders when the election is due, and adopt their models; returns the round's
    metrics (the global leader, how many clients led); ``mine`` are the (client, device) pairs this rank
    trained."""
    if not records or not algorithm.elects(r):
        return {}
    leaders = algorithm.elect({rec.cid: rec.loss for rec in records})
    chosen = sorted(set(leaders.values()))
    trained = {cid for cid, _ in mine}
    models = global_state.new_zeros(len(chosen), global_state.numel())
    for row, cid in zip(models, chosen, strict=True):
        if cid in trained:
            row.copy_(store.get(cid)["model"])  # type: ignore[index]  # it trained here this round: it has one
    ledger.record_moved(pool.all_reduce_(models))
    ledger.charge(up=models.numel() * FLOAT32_BYTES, kind="leader")
    algorithm.adopt(global_state, {g: models[chosen.index(cid)] for g, cid in leaders.items()})
    return {"leader": leaders[GLOBAL], "leaders": len(chosen)}
