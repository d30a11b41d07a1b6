"""The sequential executor: one replica trains a rank's clients one after another (Parrot's device loop).

Nothing here allocates per client but what the algorithm asks for, and nothing reads the accelerator back per
client: losses stay device tensors and times are timeline marks, both read once when the round's clients are
done. While a client trains, the next client's data and state are copied to the accelerator on a side stream
(on CPU the copy is a no-op and the side stream a no-op context).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import torch
from torch import Tensor

from fedsim.algorithms.base import ROUND_SEGMENTS, Algorithm, ClientContext, ClientState, RoundContext
from fedsim.algorithms.group import train_one
from fedsim.data.base import ClientData, FederatedDataset
from fedsim.models.replica import Replica
from fedsim.sim.executors.base import ClientRecord, Compress, Observe, StoredState
from fedsim.sim.persist.interrupted import stop_point
from fedsim.sim.rounds.cohort import client_generator
from fedsim.sim.rounds.upload import NO_STAGES, SumBuffer, UpdateStages, client_pipeline, upload
from fedsim.sim.runtime.accelerator import Accelerator
from fedsim.sim.state.state_store import StateStore
from fedsim.sim.state.write_back import StateWriteBack
from fedsim.tasks import CLASSIFICATION, Task


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
        in_flight: int = 4,
        stages: UpdateStages = NO_STAGES,
    ) -> None:
        self.replica = replica
        self.algorithm = algorithm
        self.dataset = dataset
        self.store = store
        self.seed = seed
        self.client_weight = client_weight  # samples -> aggregation weight, as the algorithm's config says
        self.accelerator = accelerator
        self.task = task
        self.stages = stages  # DP, SecAgg+ and the aggregation rule over each client's rows (upload)
        self.keep_optimizer_state = keep_optimizer_state
        self.stateful = algorithm.stateful or keep_optimizer_state
        self.write_back = StateWriteBack(store, accelerator, in_flight)
        sizes = {**algorithm.sum_sizes(replica.numel, replica.n_params), **ROUND_SEGMENTS}
        self.local_sum = SumBuffer(sizes, device=replica.flat.device)
        self.timeline = accelerator.timeline()

    def begin_round(self) -> None:
        self.local_sum.zero_()

    def _fetch(self, cid: int, stateful: bool) -> tuple[ClientData, ClientState | None]:
        """The client's data and state, copies to the accelerator queued on the side stream."""
        with self.accelerator.side_stream():
            data = self.dataset.client(cid)
            data = ClientData(self.accelerator.to_device(data.x), self.accelerator.to_device(data.y))
            state = self.store.get(cid) if stateful else None
            if state is not None:
                state = {k: self.accelerator.to_device(v) for k, v in state.items()}
        return data, state

    def train(
        self,
        round: RoundContext,
        assignments: Sequence[tuple[int, int]],
        observe: Observe | None = None,
        compress: Compress | None = None,
    ) -> list[ClientRecord]:
        """Train each ``(client, device)`` in order from ``round.start`` and add it to the local sum.

        ``observe(cid, flat)`` sees each client's local model when its local training ends; ``compress`` may
        sparsify its update rows before they are added (:func:`fedsim.sim.rounds.upload.upload`). A client's new
        state goes to the store as soon as it is on the host (``write_back``).
        """
        round_idx, global_state, coreset = round.index, round.start, self.stages.coreset
        pipeline = client_pipeline(self.stages, compress)
        stateful = self.stateful or compress is not None or coreset is not None
        prefetch = self.accelerator.is_cuda  # on a CPU a copy cannot overlap training: fetch when needed
        self.write_back.store = self.store  # a resume may have put another store in place
        self.write_back.reset_peak()
        self.timeline.begin()
        marks: list[tuple[int, int, int]] = []
        losses: list[Tensor] = []
        pending: list[tuple[int, int, int, int, int | None]] = []  # cid, device, size, samples, delta bytes
        upcoming: tuple[ClientData, ClientState | None] | None = None
        for k, (cid, device) in enumerate(assignments):
            stop_point(inner=True)  # a second signal stops the run between two clients, never inside one
            start = self.timeline.mark()
            data, state = upcoming if upcoming is not None else self._fetch(cid, stateful)
            self.accelerator.wait_side_stream()
            ready = self.timeline.mark()
            weight, size = self.client_weight(data.n_samples), data.n_samples  # a coreset stands for all its data
            self.replica.load_(global_state)
            generator = client_generator(self.seed, round_idx, cid)
            stored = StoredState.split(state, self.keep_optimizer_state, compress is not None, coreset is not None)
            if coreset is not None:  # a weighted subset (CRAIG's at the global model), chosen when due
                data, chosen = coreset.subset(data, self.replica, stored.coreset or {}, generator.initial_seed() ^ 1)
                stored = replace(stored, coreset=chosen)
            task, optimizer = self.task, stored.optimizer
            ctx = ClientContext(
                cid, round_idx, global_state, weight, generator, observe, task, optimizer, round.settings
            )
            own = stored.own if self.algorithm.stateful else None
            updates, result = train_one(self.algorithm, self.replica, data, own, ctx)
            upcoming = self._fetch(assignments[k + 1][0], stateful) if prefetch and k + 1 < len(assignments) else None
            uplinks = None if stored.uplink is None else [stored.uplink]  # the compressor fills it in place
            (delta_bytes,) = upload(updates, [cid], weight, self.local_sum, pipeline, uplinks, round_idx)
            kept = stored.joined(result.state)
            if kept:
                self.write_back.put(cid, kept)
            marks.append((start, ready, self.timeline.mark()))
            losses.append(result.loss)
            pending.append((cid, device, size, result.samples, delta_bytes))
        self.write_back.drain()
        return self._records(marks, losses, pending)  # waits for the accelerator once

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
