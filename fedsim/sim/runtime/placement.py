"""Where a run's model and client data live: the replica on the accelerator; the data there when they fit its
budget, else in pinned host memory.

On a CPU accelerator everything stays where it is. On a GPU, an :class:`~fedsim.data.base.ArrayDataset` that
fits ``data_on_device_mb`` is moved there once, so a client's data are views of device memory; a larger one is
pinned, so the executor's side-stream copies of the next client overlap the current one's training. Other
datasets (lazy or user-defined) are copied client by client. The test split always goes to the accelerator.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from fedsim.config import ConfigError, ModelConfig
from fedsim.data.base import ArrayDataset, ClientData, FederatedDataset
from fedsim.models import ModelFactory, Replica, build_model
from fedsim.models.adapters import adapt
from fedsim.models.replica import ReplicaError
from fedsim.sim.runtime.accelerator import Accelerator
from fedsim.sim.runtime.preflight import check_output
from fedsim.tasks import Task

Placement = Literal["host", "device", "pinned"]


def place_data(dataset: FederatedDataset, accelerator: Accelerator, budget_bytes: float) -> Placement:
    """Move or pin ``dataset``'s client data for ``accelerator``; returns where they are now."""
    dataset = getattr(dataset, "inner", dataset)  # a LocalHoldout places the dataset it splits
    if not accelerator.is_cuda or not isinstance(dataset, ArrayDataset):
        return "host"
    resident = dataset.nbytes <= budget_bytes
    dataset.place_(accelerator.device, resident)
    return "device" if resident else "pinned"


def placed_test(dataset: FederatedDataset, accelerator: Accelerator) -> ClientData:
    """The held-out split on the accelerator (a no-op on CPU)."""
    return ClientData(accelerator.to_device(dataset.test.x), accelerator.to_device(dataset.test.y))


def placed_replica(
    settings: ModelConfig,
    seed: int,
    dataset: FederatedDataset,
    task: Task,
    model: ModelFactory | nn.Module | None,
    accelerator: Accelerator,
) -> Replica:
    """The run's one model replica on ``accelerator``: the ``model`` section's (or the caller's factory) built on
    the host under the run's ``seed``, so every rank and accelerator starts from the same weights, or the
    caller's own module (its initial weights are then the caller's, with ``model.adapter`` put on it under the
    seed); its output is checked against the task first."""
    if isinstance(model, nn.Module):
        module = model
        if settings.adapter.enabled:  # the caller's weights, the adapter's own drawn from the run's seed
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                module = adapt(model, settings.adapter)
    else:
        module = build_model(settings, dataset.input_shape, dataset.num_classes, seed, model)
    check_output(module, dataset, task)
    try:
        return Replica(module.to(accelerator.device))
    except ReplicaError as exc:
        raise ConfigError(f"model: {exc}") from None
