"""What is refused before a run starts: a model that does not fit the task, a pool that cannot run the config."""

from __future__ import annotations

import sys
from itertools import chain

import torch
from torch import Tensor, nn

from fedsim.config import CheckpointConfig, ConfigError, EmulationConfig, StateConfig
from fedsim.data.base import FederatedDataset
from fedsim.tasks import Task, TaskMismatch


def check_output(module: nn.Module, dataset: FederatedDataset, task: Task) -> None:
    """Refuse a model whose output does not fit the task (``(batch, num_classes)`` logits for classification,
    the target's shape for regression, ...): one line saying how, before anything trains."""
    probe, target = dataset.test.x[:2], dataset.test.y[:2]
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            out = module(probe)
    except Exception as exc:
        raise ConfigError(
            f"model: fails on inputs of shape {list(probe.shape)} ({type(exc).__name__}: {exc})"
        ) from None
    finally:
        module.train(was_training)
    if not isinstance(out, Tensor):
        raise ConfigError(f"model: returns a {type(out).__name__}; the task {task.name} needs a tensor")
    try:
        task.check(out, target, dataset.num_classes)
    except TaskMismatch as exc:
        raise ConfigError(f"model: {exc}") from None


def check_targets(dataset: FederatedDataset, task: Task, given: str) -> None:
    """Refuse, in one line naming the split and the sample, a target ``task`` cannot take (a label past
    ``num_classes``) in every client's data and the test split of a dataset of your own (``given``: ``data=``,
    ``data.factory``): the loss would otherwise fail partway through the run, after its first files are
    written. It reads every client once (``client(cid)`` is cheap, by the protocol)."""
    kind = type(dataset).__name__
    splits = chain([("test", dataset.test)], ((f"client({c})", dataset.client(c)) for c in range(dataset.num_clients)))
    for where, split in splits:
        try:
            task.check_targets(split.y, dataset.num_classes)
        except TaskMismatch as exc:
            raise ConfigError(f"{given} {kind}.{where}: {exc}") from None
        for name, values in (("input", split.x), ("target", split.y)):  # a NaN would diverge the model in round 1
            if isinstance(values, Tensor) and values.is_floating_point() and not bool(values.isfinite().all()):
                bad = int((~values.isfinite()).reshape(len(values), -1).any(1).nonzero()[0, 0])
                raise ConfigError(f"{given} {kind}.{where}: sample {bad}'s {name} holds NaN or infinite values")


def check_pool(checkpoints: CheckpointConfig, state: StateConfig, world: int, stateful: bool) -> None:
    """Refuse, before anything starts, what a pool of ``world`` ranks cannot do with these settings."""
    if checkpoints.fixed and world > 1 and stateful and state.backend == "memory":
        # rank 0 writes the checkpoint and cannot see the client states the other ranks hold in memory; auto
        # takes none there, with a warning (fedsim.sim.persist.period)
        raise ConfigError(
            f"checkpoint.every={checkpoints.fixed} with more than one rank and a stateful algorithm needs"
            " state.backend=disk"
        )


def warn_if_idle(emulation: EmulationConfig, cohort: int, population: int) -> None:
    """One line on stderr when the emulation leaves under one client expected to train a round: such rounds
    change nothing, which a run would otherwise do in silence."""
    expected = min(cohort, population * emulation.availability) * (1 - emulation.dropout)
    if expected < 1:
        print(
            f"fedsim: warning: emulation.availability={emulation.availability:g} of {population} clients with "
            f"emulation.dropout={emulation.dropout:g} trains {expected:.3g} clients a round on average: most rounds "
            "will train no client and leave the model as it was",
            file=sys.stderr,
        )
