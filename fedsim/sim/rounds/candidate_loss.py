"""Power-of-choice's loss probe: each candidate client's mean loss of the current global model on its own data.

Cho, Wang and Joshi (AISTATS 2022) have the server send the global model to the d candidates, each of which
sends back its local loss F_k(w), the mean loss over all its samples (pow-d), or an estimate of it on a
mini-batch of b of its samples drawn uniformly without replacement (cpow-d; the authors' code scores a
``random.sample`` of ``min(b, n_k)`` samples). The ranks score the candidates in turn (the i-th on rank
i mod world) and add their parts with one all-reduce, so every rank reads the same floats and the selector
chooses the same cohort on each. The ledger charges what a deployment would send, under kind ``selection``:
the model (float32) down to each candidate and one float32 up from each; the forward passes and their time on
the virtual clock are not charged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import torch
from torch import Tensor

from fedsim.comm.ledger import FLOAT32_BYTES, ByteLedger, MessageSizes
from fedsim.data.base import ClientData, FederatedDataset
from fedsim.robust.attack import Attack
from fedsim.sim.executors.base import Executor
from fedsim.sim.run.settings import EngineSettings
from fedsim.sim.runtime.pool import Pool
from fedsim.tasks import Task
from fedsim.tasks.evaluate import loaded_sums

_BATCH = 0x63706F77  # "cpow": the key of the stream that draws a candidate's mini-batch


class Probed(Protocol):
    """What the probe reads of the run, as it stands when the selector asks (the engine)."""

    cfg: EngineSettings  # the seed, and the evaluation's batch in samples
    global_state: Tensor
    dataset: FederatedDataset
    task: Task
    pool: Pool
    ledger: ByteLedger
    sizes: MessageSizes
    executor: Executor  # its replica scores the model
    attack: Attack | None  # its malicious candidates report what attack.reported_loss says, here as after training


def minibatch(seed: int, round_idx: int, cid: int, n: int, b: int) -> Tensor | None:
    """``b`` of a client's ``n`` sample indices, uniformly without replacement and sorted, keyed by the seed, the
    round and the client (so every rank, and a resumed run, draws the same); None when ``b >= n`` (all of them)."""
    if b >= n:
        return None
    index = np.random.default_rng([seed, round_idx, cid, _BATCH]).choice(n, size=b, replace=False)
    return torch.from_numpy(np.sort(index))


class CandidateLoss:
    """``loss(r, cids, batch)``: the mean loss of the current global model on each of ``cids``' data in round
    ``r``, all of it (``batch`` None: pow-d) or a mini-batch of ``batch`` samples (cpow-d), as float64, the same
    on every rank. A client without samples has no loss: -inf, below every other."""

    def __init__(self, run: Probed) -> None:
        self.run = run

    def __call__(self, round_idx: int, cids: Sequence[int], batch: int | None) -> np.ndarray:
        run = self.run
        replica, seed, eval_batch = run.executor.replica, run.cfg.seed, run.cfg.eval_batch_size
        device = run.global_state.device
        losses = torch.zeros(len(cids), dtype=torch.float64, device=device)
        replica.load_(run.global_state)  # the model once for every candidate this rank scores
        for i in range(run.pool.rank, len(cids), run.pool.world):
            data = run.dataset.client(int(cids[i]))
            index = None if batch is None else minibatch(seed, round_idx, int(cids[i]), data.n_samples, batch)
            if index is not None:
                data = data.take(index.to(data.x.device))
            sums = loaded_sums(replica, ClientData(data.x.to(device), data.y.to(device)), eval_batch, run.task)
            losses[i] = sums[0] / sums[2]  # per sample (per token for a language model); 0/0 without samples
        run.ledger.record_moved(run.pool.all_reduce_(losses))
        run.ledger.charge(up=FLOAT32_BYTES * len(cids), down=run.sizes.model * len(cids), kind="selection")
        values: np.ndarray = losses.cpu().numpy()
        if run.attack is not None:  # the clients send their loss: a malicious one says what it likes here too
            said = run.attack.reported([int(c) for c in cids], values.tolist(), round_idx)
            values = np.asarray(said, dtype=np.float64)
        values[np.isnan(values)] = -np.inf
        return values
