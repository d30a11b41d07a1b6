"""The sequential executor: one replica trains a rank's clients one after another (Parrot's device loop).

Nothing here allocates per client but what the algorithm asks for, and nothing reads the accelerator back per
client: losses stay device tensors and times are timeline marks, both read once when the round's clients are
done. While a client trains, the next client's data and state are copied to the accelerator on a side stream
(on CPU the copy is a no-op and the side stream a no-op context).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from fedsim.algorithms.base import ROUND_SEGMENTS, Algorithm, ClientContext, ClientState
from fedsim.algorithms.local_sgd import OPTIMIZER_PREFIX
from fedsim.data.base import ClientData, FederatedDataset
from fedsim.models.replica import Replica
from fedsim.sim.accelerator import Accelerator
from fedsim.sim.cohort import client_generator
from fedsim.sim.executor import ClientRecord, Compress, Observe
from fedsim.sim.interrupted import stop_point
from fedsim.sim.state_store import StateStore
from fedsim.sim.sum_buffer import SumBuffer
from fedsim.tasks import CLASSIFICATION, Task


def split_state(state: ClientState | None, keep_optimizer_state: bool) -> tuple[ClientState | None, ClientState | None]:
    """A client's stored state as (the algorithm's, the optimiser's): the optimiser's is ``None`` unless the
    client keeps it (then a dict, empty on the client's first round, that local training fills in place)."""
    state = state or {}
    own = {k: v for k, v in state.items() if not k.startswith(OPTIMIZER_PREFIX)} or None
    optimizer = {k: v for k, v in state.items() if k.startswith(OPTIMIZER_PREFIX)} if keep_optimizer_state else None
    return own, optimizer


class SequentialExecutor:
    """Owns the one replica and the local sum of a rank; it trains the clients of every device the rank hosts."""

    def __init__(
        self,
        replica: Replica,
        algorithm: Algorithm,
        dataset: FederatedDataset,
        store: StateStore,
        seed: int,
        client_weight: Callable[[int], float],
        accelerator: Accelerator,
        task: Task = CLASSIFICATION,
        keep_optimizer_state: bool = False,
    ) -> None:
        self.replica = replica
        self.algorithm = algorithm
        self.dataset = dataset
        self.store = store
        self.seed = seed
        self.client_weight = client_weight  # samples -> aggregation weight, as the algorithm's config says
        self.accelerator = accelerator
        self.task = task
        self.keep_optimizer_state = keep_optimizer_state
        self.stateful = algorithm.stateful or keep_optimizer_state
        sizes = {**algorithm.sum_sizes(replica.numel, replica.n_params), **ROUND_SEGMENTS}
        self.local_sum = SumBuffer(sizes, device=replica.flat.device)
        self.timeline = accelerator.timeline()

    def begin_round(self) -> None:
        self.local_sum.zero_()

    def _fetch(self, cid: int) -> tuple[ClientData, ClientState | None]:
        """The client's data and state, copies to the accelerator queued on the side stream."""
        with self.accelerator.side_stream():
            data = self.dataset.client(cid)
            data = ClientData(self.accelerator.to_device(data.x), self.accelerator.to_device(data.y))
            state = self.store.get(cid) if self.stateful else None
            if state is not None:
                state = {k: self.accelerator.to_device(v) for k, v in state.items()}
        return data, state

    def train(
        self,
        round_idx: int,
        assignments: Sequence[tuple[int, int]],
        global_state: Tensor,
        observe: Observe | None = None,
        compress: Compress | None = None,
    ) -> list[ClientRecord]:
        """Train each ``(client, device)`` in order from ``global_state`` and add it to the local sum.

        ``observe(cid, flat)`` sees each client's local model when its local training ends; ``compress(cid,
        weight, sums)`` may sparsify the client's sums in place before they are added and returns their bytes.
        """
        weight_sum = self.local_sum.segments["weight"]
        client_count = self.local_sum.segments["clients"]
        prefetch = self.accelerator.is_cuda  # on a CPU a copy cannot overlap training: fetch when needed
        self.timeline.begin()
        marks: list[tuple[int, int, int]] = []
        losses: list[Tensor] = []
        pending: list[tuple[int, int, int, int, int | None]] = []  # cid, device, size, samples, delta bytes
        states: list[tuple[int, ClientState]] = []  # put once the round's copies to the host are done
        upcoming: tuple[ClientData, ClientState | None] | None = None
        for k, (cid, device) in enumerate(assignments):
            stop_point()  # a signal stops the run between two clients, never inside one
            start = self.timeline.mark()
            data, state = upcoming if upcoming is not None else self._fetch(cid)
            self.accelerator.wait_side_stream()
            ready = self.timeline.mark()
            weight = self.client_weight(data.n_samples)
            self.replica.load_(global_state)
            generator = client_generator(self.seed, round_idx, cid)
            own, optimizer = split_state(state, self.keep_optimizer_state)
            ctx = ClientContext(cid, round_idx, global_state, weight, generator, observe, self.task, optimizer)
            result = self.algorithm.client_update(self.replica, data, own if self.algorithm.stateful else None, ctx)
            upcoming = self._fetch(assignments[k + 1][0]) if prefetch and k + 1 < len(assignments) else None
            delta_bytes = compress(cid, weight, dict(result.sums)) if compress is not None else None
            self.local_sum.add_(result.sums)
            weight_sum += weight
            client_count += 1.0
            if result.state is not None or optimizer is not None:
                kept = {**(result.state or {}), **(optimizer or {})}
                states.append((cid, {name: self.accelerator.to_host(t) for name, t in kept.items()}))
            marks.append((start, ready, self.timeline.mark()))
            losses.append(result.loss)
            pending.append((cid, device, data.n_samples, result.samples, delta_bytes))
        records = self._records(marks, losses, pending)  # waits for the accelerator once
        for cid, state in states:
            self.store.put(cid, state)
        return records

    def _records(
        self,
        marks: list[tuple[int, int, int]],
        losses: list[Tensor],
        pending: list[tuple[int, int, int, int, int | None]],
    ) -> list[ClientRecord]:
        """The round's records: one read of every loss and one of every mark, however many clients."""
        if not pending:
            return []
        times = self.timeline.read()
        values: list[float] = torch.stack(losses).tolist()
        return [
            ClientRecord(cid, device, times[s], times[e], size, samples, loss, delta, times[r] - times[s])
            for (cid, device, size, samples, delta), (s, r, e), loss in zip(pending, marks, values, strict=True)
        ]
