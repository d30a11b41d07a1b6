"""A round's evaluations: the global model on the test set, and the clients' models on their held-out data.

Every rank scores its part (its shard of the test set; the clients it trained) and the parts are added up
with one all-reduce, or gathered, charged to the ledger as bytes moved.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

from torch import Tensor

from fedsim.comm.ledger import ByteLedger
from fedsim.data.base import ClientData, FederatedDataset
from fedsim.data.holdout import LocalHoldout
from fedsim.models import Replica
from fedsim.sim.rounds.federated_eval import personal_models, score_clients, summarize
from fedsim.sim.runtime.pool import Pool
from fedsim.sim.state.state_store import StateStore
from fedsim.tasks import EvalResult, Task, evaluation_sums


def evaluate_global(
    replica: Replica, model: Tensor, test: ClientData, batch: int, task: Task, pool: Pool, ledger: ByteLedger,
    attack: Any,
) -> EvalResult:  # fmt: skip
    """``model`` on the test set, every rank's shard summed; with an attack, a backdoor's success rate too."""
    sums = evaluation_sums(replica, model, test, batch, task)
    ledger.record_moved(pool.all_reduce_(sums))
    result = task.result(sums)
    if attack is not None:  # a backdoor's success rate on the triggered test inputs
        ledger.record_moved(attack.score_(replica, model, batch, task, pool.all_reduce_))
    return result


def evaluate_clients(
    algorithm: Any, store: StateStore, personal: bool, replica: Replica,
    model: Tensor, dataset: FederatedDataset, cids: list[int], task: Task, batch: int, pool: Pool,
    ledger: ByteLedger,
) -> dict[str, float | int | str] | None:  # fmt: skip
    """The clients ``cids`` (this rank's) scored on their held-out data, every rank's gathered and summarised;
    None when the clients hold nothing back."""
    if not isinstance(dataset, LocalHoldout):
        return None
    models = personal_models(algorithm, store.get, personal)
    scores = score_clients(replica, model, dataset, cids, task, batch, models)
    gathered, moved = pool.all_gather(scores)
    ledger.record_moved(moved)
    return summarize(list(chain.from_iterable(gathered)), task.metric)
