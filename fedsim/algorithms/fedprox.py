"""FedProx (Li et al., MLSys 2020): local SGD on the loss plus ``mu/2 ||w - w_global||^2``."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from torch import Tensor

from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.group import ClientGroup, GroupHook
from fedsim.config import AlgorithmConfig


class FedProxConfig(AlgorithmConfig):
    kind: Literal["fedprox"]
    mu: float = Field(
        0.01, ge=0, description="the proximal term's weight, pulling each client towards the global model"
    )
    adds_mean: ClassVar[bool] = True
    sends_local_model: ClassVar[bool] = True


class FedProx:
    """FedAvg whose local gradient gets ``mu * (w - w_global)`` added in place after every backward."""

    name = "fedprox"
    stateful = False

    def __init__(self, cfg: FedProxConfig) -> None:
        self.cfg = cfg

    # all but the proximal term is FedAvg's: the same sums, server step and (no) state
    sum_sizes = FedAvg.sum_sizes
    broadcast_numel = FedAvg.broadcast_numel
    client_state_sizes = FedAvg.client_state_sizes
    client_updates = FedAvg.client_updates
    server_update = FedAvg.server_update
    state_dict = FedAvg.state_dict
    load_state_dict = FedAvg.load_state_dict

    def client_grad_hook(self, group: ClientGroup) -> GroupHook | None:
        anchor = group.global_state[: group.n_params]
        mu = self.cfg.mu

        def proximal(params: Tensor, grad: Tensor, lo: int, hi: int) -> None:  # the same term for every client
            grad.add_(params, alpha=mu).add_(anchor[lo:hi].view(params.shape[1:]), alpha=-mu)

        return proximal
