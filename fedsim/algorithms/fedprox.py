"""FedProx (Li et al., MLSys 2020): local SGD on the loss plus ``mu/2 ||w - w_global||^2``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field
from torch import Tensor

from fedsim.algorithms.fedavg import apply_mean_delta
from fedsim.algorithms.group import ClientGroup, GroupHook, weighted_delta_sum
from fedsim.config import AlgorithmConfig


class FedProxConfig(AlgorithmConfig):
    name: Literal["fedprox"]
    mu: float = Field(0.01, ge=0)
    server_lr: float = Field(1.0, gt=0)


class FedProx:
    """FedAvg whose local gradient gets ``mu * (w - w_global)`` added in place after every backward."""

    name = "fedprox"
    stateful = False

    def __init__(self, cfg: FedProxConfig) -> None:
        self.cfg = cfg

    def sum_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        return {"delta": numel}

    def broadcast_numel(self, numel: int, n_params: int) -> int:
        return 0

    def client_state_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        return {}

    def client_grad_hook(self, group: ClientGroup) -> GroupHook | None:
        anchor = group.global_state[: group.n_params]
        mu = self.cfg.mu

        def proximal(params: Tensor, grad: Tensor, lo: int, hi: int) -> None:  # the same term for every client
            grad.add_(params, alpha=mu).add_(anchor[lo:hi].view(params.shape[1:]), alpha=-mu)

        return proximal

    def client_sums(self, group: ClientGroup) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        return {"delta": weighted_delta_sum(group)}, {}

    def server_update(self, global_state: Tensor, sums: Mapping[str, Tensor], n_params: int) -> None:
        apply_mean_delta(global_state, sums, self.cfg.server_lr)

    def state_dict(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        return None
