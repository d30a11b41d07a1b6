"""The server's root set (FLTrust, Cao et al., NDSS 2021): a small clean training set the server holds, and the
update the server trains on it each round from the clients' starting model, as a client would (the round's
local-training settings), to compare the clients' updates with.

The set is ``samples`` training samples drawn uniformly, without replacement, from the whole population's
training data before any of it is poisoned (the paper's root set sampled from the training data), keyed by
the run's seed; every rank draws the same set and trains the same update, so no rank waits for another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from fedsim.algorithms.base import ClientContext
from fedsim.algorithms.local_sgd import local_sgd
from fedsim.data.base import ClientData, FederatedDataset
from fedsim.streams import stream_seed

if TYPE_CHECKING:
    from fedsim.algorithms.base import RoundContext
    from fedsim.models.replica import Replica
    from fedsim.tasks import Task

_ROOT = 0x5254  # the stream beside the seed that draws the root set, and (with the round) its batches


def root_samples(dataset: FederatedDataset, samples: int, seed: int) -> ClientData:
    """``samples`` of the population's training samples, uniformly without replacement, in population order."""
    sizes = np.array([dataset.n_samples(c) for c in range(dataset.num_clients)], dtype=np.int64)
    total = int(sizes.sum())
    if samples > total:
        raise ValueError(f"aggregator.root_samples={samples} exceeds the {total} training samples of the population")
    chosen = np.sort(np.random.default_rng([seed, _ROOT]).choice(total, samples, replace=False))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    owners = np.searchsorted(starts, chosen, side="right") - 1
    xs, ys = [], []
    for cid in np.unique(owners):
        data = dataset.client(int(cid))
        local = torch.from_numpy(chosen[owners == cid] - starts[cid]).to(data.x.device)
        xs.append(data.x.index_select(0, local))
        ys.append(data.y.index_select(0, local))
    return ClientData(torch.cat(xs), torch.cat(ys))


class RootSet:
    """The server's ``data`` (moved to ``device`` once) and the loss ``task`` it trains on."""

    def __init__(self, data: ClientData, task: Task, device: torch.device) -> None:
        self.data, self.task = ClientData(data.x.to(device), data.y.to(device)), task

    def update(self, replica: Replica, context: RoundContext, seed: int) -> Tensor:
        """The server's update this round: local training on the root set from ``context.start``, minus it."""
        data = self.data
        replica.load_(context.start)
        generator = torch.Generator().manual_seed(stream_seed(seed, context.index, _ROOT))
        ctx = ClientContext(-1, context.index, context.start, 1.0, generator, task=self.task, settings=context.settings)
        local_sgd(replica, data, context.settings, ctx, keep_state=False)
        return replica.flat - context.start
