"""A device: one model replica that trains a list of clients in sequence and returns their local sum.

This is the contract the scheduler and the multi-device pool build on: "a list of clients in, one local sum
out". Nothing here allocates per client except what the algorithm itself asks for.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from torch import Tensor

from fedsim.algorithms.base import ROUND_SEGMENTS, Algorithm, ClientContext
from fedsim.data.base import FederatedDataset
from fedsim.models.replica import Replica
from fedsim.sim.cohort import client_generator
from fedsim.sim.state_store import StateStore
from fedsim.sim.sum_buffer import SumBuffer


@dataclass(frozen=True)
class ClientRecord:
    """One client's turn on a device: unix ``start``/``end`` seconds, ``size`` (its training samples),
    ``samples`` seen (with repeats over epochs), mean train ``loss``."""

    cid: int
    device: int
    start: float
    end: float
    size: int
    samples: int
    loss: float
    delta_bytes: int | None = None  # wire bytes of a compressed update (top-k); None: sent dense

    @property
    def seconds(self) -> float:
        return self.end - self.start


class Device:
    """Owns the one replica and the local sum of a rank; it trains the clients of every device the rank hosts."""

    def __init__(
        self,
        replica: Replica,
        algorithm: Algorithm,
        dataset: FederatedDataset,
        store: StateStore,
        seed: int,
        client_weight: Callable[[int], float],
    ) -> None:
        self.replica = replica
        self.algorithm = algorithm
        self.dataset = dataset
        self.store = store
        self.seed = seed
        self.client_weight = client_weight  # samples -> aggregation weight, as the algorithm's config says
        self.local_sum = SumBuffer({**algorithm.sum_sizes(replica.numel, replica.n_params), **ROUND_SEGMENTS})

    def begin_round(self) -> None:
        """Zero the local sum; every client this rank trains in the round is then added to it."""
        self.local_sum.zero_()

    def train(
        self,
        round_idx: int,
        assignments: Sequence[tuple[int, int]],
        global_state: Tensor,
        observe: Callable[[int, Tensor], None] | None = None,
        compress: Callable[[int, float, dict[str, Tensor]], int | None] | None = None,
    ) -> list[ClientRecord]:
        """Train each ``(client, device)`` in order from ``global_state`` and add it to the local sum.

        ``device`` is the logical device the client is charged to; the rank's one replica trains them all.
        ``observe(cid, flat)`` sees each client's local model when its local training ends; ``compress(cid,
        weight, sums)`` may sparsify the client's sums in place before they are added and returns their bytes.
        """
        weight_sum = self.local_sum.segments["weight"]
        client_count = self.local_sum.segments["clients"]
        stateful = self.algorithm.stateful
        records: list[ClientRecord] = []
        for cid, device in assignments:
            start = time.time()
            data = self.dataset.client(cid)
            weight = self.client_weight(data.n_samples)
            self.replica.load_(global_state)
            state = self.store.get(cid) if stateful else None
            generator = client_generator(self.seed, round_idx, cid)
            ctx = ClientContext(cid, round_idx, global_state, weight, generator, observe)
            result = self.algorithm.client_update(self.replica, data, state, ctx)
            delta_bytes = compress(cid, weight, dict(result.sums)) if compress is not None else None
            self.local_sum.add_(result.sums)
            weight_sum += weight
            client_count += 1.0
            if result.state is not None:
                self.store.put(cid, result.state)
            end = time.time()
            records.append(
                ClientRecord(cid, device, start, end, data.n_samples, result.samples, result.loss, delta_bytes)
            )
        return records
