"""Which executor trains a run's clients, and building it from the config.

The engine derives the executor, like everything else it derives from the config, in one place, so that a
setting changed between rounds (:meth:`fedsim.sim.rounds.engine.Engine.reconfigure`) takes effect from the next one.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fedsim.algorithms.base import Algorithm
from fedsim.config import AlgorithmConfig, ConfigError, CoresetConfig, ExecutorConfig, StateConfig
from fedsim.data.base import FederatedDataset
from fedsim.models.replica import Replica
from fedsim.sim.executors.base import Executor
from fedsim.sim.executors.fused import FusedExecutor, why_not_fused
from fedsim.sim.executors.sequential import SequentialExecutor
from fedsim.sim.executors.stacked import why_forward_not_stacked
from fedsim.sim.rounds.upload import NO_STAGES, UpdateStages
from fedsim.sim.runtime.accelerator import Accelerator
from fedsim.sim.state.state_store import StateStore
from fedsim.tasks import CLASSIFICATION, Task

# On a CPU, K fused clients' convolution is one grouped convolution over K clients' activations, which leave the
# cache where one client's stay in it. The zoo's GroupNorm CNN (batches of 16, K = 8 or 32; bench/auto_executor.py
# on an AMD EPYC with 2 cores) trained fused 2.2x faster than sequential on 8 x 8 images (1,024 values a sample out
# of its first convolution), about as fast at 16 x 16 and 20 x 20 (4,096 and 6,400 values: 1.08x and 1.10x, and
# slower in another run) and 0.85-0.87x as fast from 24 x 24 on one thread; on two, 1.6x faster at 16 x 16 (2,048
# values a thread), 1.03x at 24 x 24 and 0.91x at 28 x 28. So fused pays up to this many values per torch thread
FUSED_CONV_VALUES = 4096


def executor_kind(
    settings: ExecutorConfig,
    coreset: CoresetConfig,
    algorithm: object,
    replica: Replica,
    task: Task = CLASSIFICATION,
    dataset: FederatedDataset | None = None,
) -> str:
    """``sequential`` or ``fused``: what ``settings.kind`` asks for, ``auto`` resolved (sequential where the
    run cannot fuse, or where :func:`sequential_is_faster` for one of ``dataset``'s inputs); a ConfigError when
    fused was asked for and cannot be. With a ``dataset``, the model's forward is tried for two clients at once
    on one of its inputs (:func:`~fedsim.sim.executors.stacked.why_forward_not_stacked`)."""
    reason = why_not_fused(algorithm, replica, task)
    if reason is None and settings.kind != "sequential" and dataset is not None:
        reason = why_forward_not_stacked(replica, _one_input(dataset))
    if coreset.enabled:
        reason = f"coreset.kind={coreset.kind} trains on a weighted subset, which only sequential does yet"
    if settings.kind == "auto":
        slower = reason is None and dataset is not None and sequential_is_faster(replica, _one_input(dataset))
        return "sequential" if reason or slower else "fused"
    if settings.kind == "fused" and reason:
        raise ConfigError(f"executor.kind=fused: {reason}")
    return settings.kind


def build_executor(
    kind: str,
    settings: ExecutorConfig,
    opt: AlgorithmConfig,
    state: StateConfig,
    seed: int,
    replica: Replica,
    algorithm: Algorithm,
    dataset: FederatedDataset,
    store: StateStore,
    accelerator: Accelerator,
    task: Task,
    stages: UpdateStages = NO_STAGES,
) -> Executor:
    """The ``kind`` executor (:func:`executor_kind`) over the rank's one ``replica``, weighting clients and
    keeping their optimiser state as ``opt`` (the algorithm's settings) says now, with up to ``state.in_flight``
    client states on their way from a GPU; under DP every client weighs 1 (DP-FedAvg: a
    client's clipped update is its whole contribution); each client's rows pass through ``stages``."""
    weight = _uniform if stages.privacy is not None else opt.client_weight
    parts = (replica, algorithm, dataset, store, seed, weight, accelerator)
    if kind == "fused":
        return FusedExecutor(*parts, settings.clients, task, state.in_flight, stages)
    return SequentialExecutor(*parts, task, opt.keeps_optimizer_state, state.in_flight, stages)


def _uniform(n_samples: int) -> float:
    return 1.0


def _one_input(dataset: FederatedDataset) -> Tensor:
    """A test input, or the first client's where the test set is empty."""
    test = dataset.test
    return test.x[:1] if test.n_samples else dataset.client(0).x[:1]


def sequential_is_faster(replica: Replica, sample: Tensor) -> bool:
    """Whether the replica's model, on a CPU, has a convolution whose output for one sample (a batch of one) has
    more than :data:`FUSED_CONV_VALUES` values per torch thread. One forward pass without gradients finds out;
    the global random state is left as it was (a dropout layer draws from it)."""
    convolutions = [m for m in replica.module.modules() if isinstance(m, nn.modules.conv._ConvNd)]
    if replica.flat.device.type != "cpu" or not convolutions:
        return False
    largest = [0]

    def measure(_module: nn.Module, _args: object, out: Tensor) -> None:
        largest[0] = max(largest[0], out[0].numel())

    handles = [m.register_forward_hook(measure) for m in convolutions]
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            replica.module(sample[:1].to(replica.flat.device))
    finally:
        for handle in handles:
            handle.remove()
    return largest[0] > FUSED_CONV_VALUES * torch.get_num_threads()
