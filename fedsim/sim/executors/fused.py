"""The fused executor: K same-shaped clients trained at once, as one set of kernels (HFTA, FedJAX).

The K clients' flat models are the rows of one ``(K, numel)`` tensor. Every step runs the model once over all of
them with ``torch.func.vmap`` of ``functional_call`` (a linear layer becomes one batched matmul, a convolution
one batched convolution; a frozen base with trained adapters in it runs once over the K clients' rows, only the
adapters per client: :mod:`fedsim.sim.executors.shared_base`), takes the gradient of the sum of the K clients'
mean losses (each row's gradient is its own client's), lets the algorithm add its correction as a broadcast, and
updates all rows with one ``sub_``. Each client draws its batches from its own RNG exactly as the sequential
executor does (:func:`fedsim.algorithms.local_sgd.local_sgd`); batches of unequal size are padded and masked, and a
client that has taken all its steps is masked out of the remaining ones (FedJAX's blocks). The local sum is the same as
the sequential executor's up to floating-point summation order.

Fusing needs a model without BatchNorm statistics (they would be per client: ``norm: group`` or ``none`` fuse;
float buffers that training leaves alone, such as a transformer's position table, are shared by the K clients)
and an algorithm with a fused form (:class:`~fedsim.algorithms.fused.FusedAlgorithm`). Dropout draws each
client's own masks (``vmap``'s ``randomness="different"``) from a stream seeded, per group, from the group's
first client's key: a run repeats, but a client's masks depend on the group it trains in, so a dropout model's
fused run is not the sequential one's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from fedsim.algorithms.base import ROUND_SEGMENTS, Algorithm, RoundContext
from fedsim.algorithms.group import ClientGroup, ClientUpdates, GroupAlgorithm, GroupHook, has_group_form
from fedsim.algorithms.sgd import sgd_update_
from fedsim.config import AlgorithmConfig, ConfigError
from fedsim.data.base import ClientData, FederatedDataset, joined, rows
from fedsim.models.replica import Replica
from fedsim.sim.executors import fused_sgd
from fedsim.sim.executors.base import ClientRecord, Compress, Observe, StoredState
from fedsim.sim.executors.batch_plan import BatchPlan
from fedsim.sim.executors.stacked import member_losses, param_layout, stacked_forward, why_model_not_stacked
from fedsim.sim.rounds.cohort import client_generator
from fedsim.sim.rounds.upload import NO_STAGES, SumBuffer, UpdateStages, client_pipeline, upload
from fedsim.sim.runtime.accelerator import Accelerator
from fedsim.sim.state.state_store import StateStore
from fedsim.sim.state.write_back import StateWriteBack
from fedsim.streams import seed_model_randomness
from fedsim.tasks import CLASSIFICATION, Task


def why_not_fused(algorithm: object, replica: Replica, task: Task = CLASSIFICATION) -> str | None:
    """The reason this algorithm, model and task cannot train fused, or None when they can."""
    if not has_group_form(algorithm):
        name = getattr(algorithm, "name", type(algorithm).__name__)
        return f"algorithm {name!r} writes its own client_update (more than local SGD): one client at a time"
    opt: AlgorithmConfig = algorithm.cfg  # type: ignore[attr-defined]  # has_group_form: it has one
    client = opt.client_optimizer
    if not type(client).fuses:  # declared by the optimiser's settings class
        return f"the client optimiser {client.kind} is not fused yet (plain SGD is)"
    if not client.stateless:
        return "client momentum (client_optimizer.momentum) is not fused yet"
    return why_model_not_stacked(replica, task)


def _dim_order(tensor: Tensor) -> list[int]:
    """The dimensions of a dense tensor from the one with the largest stride to the smallest."""
    strides = tensor.stride()
    return sorted(range(tensor.dim()), key=lambda d: (-strides[d], d))


class _Trained(NamedTuple):
    """One trained group: its clients, its timeline marks (start, data ready, end), samples each saw, each
    client's mean loss (a device tensor, read with the round's others) and wire bytes (None: sent dense)."""

    clients: Sequence[tuple[int, int]]
    start: int
    ready: int
    end: int
    samples: list[int]
    losses: Tensor
    sent: list[int | None]


class FusedExecutor:
    """Trains a rank's clients in groups of ``group_size``, each group as one stacked model."""

    def __init__(
        self,
        replica: Replica,
        algorithm: Algorithm,
        dataset: FederatedDataset,
        store: StateStore,
        seed: int,
        client_weight: Callable[[int], float],
        accelerator: Accelerator,
        group_size: int,
        task: Task = CLASSIFICATION,
        in_flight: int = 4,
        stages: UpdateStages = NO_STAGES,
    ) -> None:
        reason = why_not_fused(algorithm, replica, task)
        if reason is not None:
            raise ConfigError(f"executor.kind=fused: {reason}")
        self.replica, self.algorithm, self.dataset, self.store = replica, algorithm, dataset, store
        self.group_form: GroupAlgorithm = algorithm  # type: ignore[assignment]  # checked by why_not_fused
        self.task = task
        self.stages = stages  # DP, SecAgg+ and the aggregation rule over each client's rows, inside the group
        self.seed, self.client_weight, self.accelerator, self.group_size = seed, client_weight, accelerator, group_size
        sizes = {**algorithm.sum_sizes(replica.numel, replica.n_params), **ROUND_SEGMENTS}
        self.local_sum = SumBuffer(sizes, device=replica.flat.device)
        self.timeline = accelerator.timeline()
        self.write_back = StateWriteBack(store, accelerator, in_flight)
        self.state_sizes = self.group_form.client_state_sizes(replica.numel, replica.n_params)
        self.layout = param_layout(replica.module)
        # each client draws its own dropout masks: the group's stream is seeded from its first client's key
        self.forward = stacked_forward(replica.module)
        self.sgd_layers = fused_sgd.sgd_layers(replica.module)  # None: not a plain feed-forward stack
        self._scratch: dict[tuple[str, tuple[int, ...]], Tensor] = {}  # a group's working tensors (_reused)
        self._settings: AlgorithmConfig = algorithm.cfg  # type: ignore[attr-defined]  # the round's, once it trains
        self._order: dict[str, list[int]] = {}  # per parameter, its dimensions from outermost to innermost

    def begin_round(self) -> None:
        self.local_sum.zero_()

    @property
    def opt(self) -> AlgorithmConfig:
        """Local training's settings in the round being trained (a knob may change them round to round)."""
        return self._settings

    def train(
        self,
        round: RoundContext,
        assignments: Sequence[tuple[int, int]],
        observe: Observe | None = None,
        compress: Compress | None = None,
    ) -> list[ClientRecord]:
        """Train the clients in groups of ``group_size`` in the order given; records as the sequential executor.

        Each group's update rows pass through ``compress`` client by client before they are summed
        (:func:`fedsim.sim.rounds.upload.upload`), as in the sequential executor."""
        reason = why_not_fused(self.algorithm, self.replica, self.task)
        if reason:  # a setting changed after the run started (Simulation.set): refuse rather than ignore it
            raise ConfigError(f"executor.kind=fused: {reason}")
        round_idx, global_state, self._settings = round.index, round.start, round.settings
        pipeline = client_pipeline(self.stages, compress)
        self.write_back.store = self.store  # a resume may have put another store in place
        self.write_back.reset_peak()
        self.timeline.begin()
        groups: list[_Trained] = []
        for lo in range(0, len(assignments), self.group_size):
            group = assignments[lo : lo + self.group_size]
            start = self.timeline.mark()
            data = [self.dataset.client(cid) for cid, _ in group]
            generators = self._generators(round_idx, group)
            batches = BatchPlan([d.n_samples for d in data], generators, self.opt)
            cids = [c for c, _ in group]
            stateful = bool(self.state_sizes) or compress is not None
            stored = [
                StoredState.split(self.store.get(cid) if stateful else None, False, compress is not None)
                for cid in cids
            ]
            stacked = self._stack_states(stored)
            ready = self.timeline.mark()
            seed_model_randomness(generators[0], self.replica.flat.device)  # keyed by its seed, not its state
            losses, updates, weights = self._train_group(data, batches, stacked, global_state, cids, observe, round_idx)
            uplinks = None if compress is None else [s.uplink or {} for s in stored]
            sent = upload(updates, cids, weights, self.local_sum, pipeline, uplinks, round_idx)
            for k, cid in enumerate(cids if stateful else ()):  # the store copies each row: no view of the stack
                kept = StoredState(None, None, None if uplinks is None else uplinks[k]).joined(
                    {n: t[k] for n, t in updates.states.items()}
                )
                if kept:
                    self.write_back.put(cid, kept)
            groups.append(_Trained(group, start, ready, self.timeline.mark(), batches.samples, losses, sent))
        self.write_back.drain()
        self._scratch.clear()
        return self._records(groups, [self.dataset.n_samples(cid) for cid, _ in assignments])

    def _alloc(self, name: str, shape: tuple[int, ...]) -> Tensor:
        """An uninitialised (K, *shape) tensor in the memory order this parameter's gradients come in."""
        order = self._order.get(name, list(range(len(shape))))
        permuted = torch.empty([shape[d] for d in order], device=self.replica.flat.device)
        return permuted.permute(sorted(range(len(order)), key=order.__getitem__))

    def _reused(self, key: str, shape: tuple[int, ...]) -> Tensor:
        """An uninitialised tensor, the same memory as the round's last group's of this key and shape.

        A group's stacked parameters and local models are megabytes each; allocated afresh every group, a CPU
        faults every page in again (fused W1 ran 1-4% slower). Nothing outlives the group in them: the update
        rows are summed, or copied by a gathering rule, a compressor or the state store, before the next group
        starts, and observers copy what they keep. They are let go when the round's training ends, so memory
        between rounds is what it was without them."""
        kept = self._scratch.get((key, shape))
        if kept is None:
            kept = self._scratch[(key, shape)] = torch.empty(shape, device=self.replica.flat.device)
        return kept

    def _generators(self, round_idx: int, group: Sequence[tuple[int, int]]) -> list[torch.Generator]:
        return [client_generator(self.seed, round_idx, cid) for cid, _ in group]

    def _stack_states(self, stored: list[StoredState]) -> dict[str, Tensor]:
        """The group's algorithm states by name, (K, size) on the accelerator; zeros for a client without one."""
        device = self.replica.flat.device
        stacked = {n: torch.zeros((len(stored), size), device=device) for n, size in self.state_sizes.items()}
        for k, state in enumerate(stored):
            for name, tensor in (state.own or {}).items():
                if name in stacked:
                    stacked[name][k].copy_(tensor, non_blocking=True)
        return stacked

    def _train_group(
        self,
        data: list[ClientData],
        plan: BatchPlan,
        states: dict[str, Tensor],
        global_state: Tensor,
        cids: list[int],
        observe: Observe | None,
        round_idx: int,
    ) -> tuple[Tensor, ClientUpdates, Tensor]:
        """Local SGD of the group's clients on their stacked models; returns their mean losses, their updates
        (and new states) and their aggregation weights."""
        opt, device, n_params, k = self.opt, self.replica.flat.device, self.replica.n_params, len(data)
        lr = opt.client_lr(round_idx)
        x, y = self._group_data(data, plan.padded)
        index, mask, active = (t.to(device, non_blocking=True) for t in (plan.index, plan.mask, plan.active))
        weights = torch.tensor([self.client_weight(d.n_samples) for d in data], device="cpu").to(device)
        steps = torch.tensor(plan.steps, dtype=torch.float32, device="cpu").to(device)
        local = self._reused("local models", (k, global_state.numel()))  # filled once training is done
        group = ClientGroup(local, global_state, weights, steps, n_params, lr, states)
        hook = self.group_form.client_grad_hook(group)
        batches = (x, y, index, mask, active)
        if self.sgd_layers is not None and hook is None and not opt.client_optimizer.weight_decay:
            loss_sum, trained = self._steps_fused_into_backward(self.sgd_layers, global_state, batches, lr)
        else:
            loss_sum, trained = self._steps(global_state, batches, lr, hook)
        # with no observer of the local models, their deltas go straight into local: one pass over the K models
        # where a copy and the algorithm's subtraction take two
        for name, o, shape in self.layout:
            block = local[:, o : o + shape.numel()].view(k, *shape)
            if observe is None:
                torch.sub(trained[name], global_state[o : o + shape.numel()].view(shape), out=block)
            else:
                block.copy_(trained[name])
        if observe is None:  # float buffers (none in a model that fuses) are not trained: their deltas are 0
            local[:, n_params:].zero_()
            group = dataclasses.replace(group, holds_deltas=True)
        else:
            local[:, n_params:].copy_(global_state[n_params:])
            for row, cid in enumerate(cids):
                observe(cid, local[row])
        return loss_sum / steps, self.group_form.client_updates(group), weights

    def _group_data(self, data: list[ClientData], padded: bool) -> tuple[Tensor, Tensor]:
        """The group's samples, concatenated, on the accelerator; with the zero row that pads short batches
        after them when the plan has one, else, where the clients lie back to back in one array, as a view."""
        device = self.replica.flat.device
        x, y = (None, None) if padded else (joined([d.x for d in data]), joined([d.y for d in data]))
        if x is None or y is None:
            x = torch.cat([*(d.x for d in data), torch.zeros_like(data[0].x[:1])])
            y = torch.cat([*(d.y for d in data), torch.zeros_like(data[0].y[:1])])
        return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    def _client_loss(self, logits: Tensor, yb: Tensor, mb: Tensor) -> Tensor:
        return member_losses(self.task, logits, yb, mb)

    def _steps_fused_into_backward(
        self, layers: list[fused_sgd.Layer], global_state: Tensor, batches: tuple[Tensor, ...], lr: float
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Plain local SGD with each linear layer's step written by its backward
        (:mod:`fedsim.sim.executors.fused_sgd`); returns the clients' summed losses and their trained (K, *shape)
        parameters by name."""
        x, y, index, mask, active = batches
        k = active.shape[1]
        # every parameter starts as the global one, shared by the K clients: the first step's forward multiplies
        # it once for all of them, and its backward writes each parameter's (K, *shape) copies, contiguous (into
        # the last group's buffers), so later steps' batched matmuls and in-place steps run on one block
        stack = fused_sgd.Stack(
            {name: global_state[o : o + shape.numel()].view(shape) for name, o, shape in self.layout},
            {name: self._reused(f"stacked {name}", (k, *shape)) for name, _, shape in self.layout},
        )
        loss_sum = torch.zeros(k, device=global_state.device)
        for step in range(index.shape[0]):
            rate = -lr * active[step]  # 0 for a client that has taken all its steps
            logits = fused_sgd.forward(layers, stack, rows(x, index[step]), rate)
            client_loss = self._client_loss(logits, rows(y, index[step]), mask[step])
            client_loss.sum().backward()
            loss_sum += client_loss.detach() * active[step]
        return loss_sum, stack.params

    def _steps(
        self, global_state: Tensor, batches: tuple[Tensor, ...], lr: float, hook: GroupHook | None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """Local SGD on stacked parameters with materialised gradients (the algorithm's hook edits them);
        returns the clients' summed losses and their trained (K, *shape) parameters by name."""
        x, y, index, mask, active = batches
        k, device, opt = active.shape[1], global_state.device, self.opt
        # during local training each parameter is its own (K, *shape) tensor, laid out as its gradient comes
        # (learned on the first step), so the batched kernels and the update read memory in order
        stacked = {
            name: self._alloc(name, (k, *shape)).copy_(global_state[o : o + shape.numel()].view(shape))
            for name, o, shape in self.layout
        }
        loss_sum = torch.zeros(k, device=device)
        for step in range(index.shape[0]):
            params = {name: p.detach().requires_grad_(True) for name, p in stacked.items()}
            xb, yb = rows(x, index[step]), rows(y, index[step])
            client_loss = self._client_loss(self.forward(params, xb), yb, mask[step])
            grads = torch.autograd.grad(client_loss.sum(), list(params.values()))
            rate = -lr * active[step]  # 0 for a client that has taken all its steps
            for (name, o, shape), grad in zip(self.layout, grads, strict=True):
                value = stacked[name]
                if value.stride() != grad.stride():  # lay the parameter out as its gradient comes
                    value = stacked[name] = torch.empty_like(grad).copy_(value)
                    self._order[name] = _dim_order(grad)
                if hook is not None:
                    hook(value, grad, o, o + shape.numel())
                sgd_update_(value, grad, rate.view(k, *[1] * len(shape)), opt.client_optimizer.weight_decay)
            loss_sum += client_loss.detach() * active[step]
        return loss_sum, stacked

    def _records(self, groups: list[_Trained], sizes: list[int]) -> list[ClientRecord]:
        """One read of every loss and every mark for the round; a group's time is split evenly among its
        clients, laid end to end, so the timeline and the runtime model see each client's share."""
        if not groups:
            return []
        times = self.timeline.read()
        losses: list[float] = torch.cat([g.losses for g in groups]).tolist()
        records, i = [], 0
        for group, s, r, e, samples, _, sent in groups:
            share, wait = (times[e] - times[s]) / len(group), (times[r] - times[s]) / len(group)
            for k, (cid, device) in enumerate(group):
                begin = times[s] + k * share
                records.append(
                    ClientRecord(cid, device, begin, begin + share, sizes[i], samples[k], losses[i], sent[k], wait)
                )
                i += 1
        return records
