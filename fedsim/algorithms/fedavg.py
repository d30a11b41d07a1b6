"""FedAvg (McMahan et al., 2017): local SGD, server applies the weighted mean of the client deltas."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Literal

from torch import Tensor

from fedsim.algorithms.base import ClientContext, MeanUpdate
from fedsim.algorithms.group import ClientGroup, ClientUpdates, GroupHook, weighted_deltas
from fedsim.config import AlgorithmConfig
from fedsim.models.replica import Replica


class FedAvgConfig(AlgorithmConfig):
    kind: Literal["fedavg"]
    adds_mean: ClassVar[bool] = True
    sends_local_model: ClassVar[bool] = True


class FedAvg:
    """Sums ``weight * (local - global)`` over the whole flat state (BatchNorm statistics included)."""

    name = "fedavg"
    stateful = False

    def __init__(self, cfg: FedAvgConfig) -> None:
        self.cfg = cfg

    def sum_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        return {"delta": numel}

    def broadcast_numel(self, numel: int, n_params: int) -> int:
        return 0

    def client_state_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        return {}

    def client_grad_hook(self, group: ClientGroup) -> GroupHook | None:
        return None

    def client_updates(self, group: ClientGroup) -> ClientUpdates:
        return weighted_deltas(group)

    def server_update(self, global_state: Tensor, sums: Mapping[str, Tensor], n_params: int) -> MeanUpdate:
        return mean_delta(sums)

    def state_dict(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        return None


def weighted_delta(replica: Replica, ctx: ClientContext) -> Tensor:
    """``weight * (local - global)`` computed in the replica's own storage (it is reloaded next client)."""
    ctx.local_model_done(replica.flat)
    return replica.flat.sub_(ctx.global_state).mul_(ctx.weight)


def mean_delta(sums: Mapping[str, Tensor]) -> MeanUpdate:
    """The clients' weighted mean delta, ``sum(weight * delta) / sum(weight)``."""
    return MeanUpdate(sums["delta"], float(sums["weight"]))


def apply_mean_delta(global_state: Tensor, sums: Mapping[str, Tensor], server_lr: float) -> None:
    """``global += server_lr * sum(weight * delta) / sum(weight)``, in place."""
    global_state.add_(sums["delta"], alpha=server_lr / float(sums["weight"]))
