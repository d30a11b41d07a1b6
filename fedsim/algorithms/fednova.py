"""FedNova (Wang et al., NeurIPS 2020) for local SGD: normalise each delta by its number of local steps.

Clients that take more steps (more data, more epochs) no longer pull the average towards their own optimum;
the server rescales the averaged normalised direction by the effective number of steps ``tau_eff``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch
from torch import Tensor

from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.group import ClientGroup, ClientUpdates
from fedsim.config import ServerStepConfig


class FedNovaConfig(ServerStepConfig):
    name: Literal["fednova"]


class FedNova:
    """Sums ``weight * delta / tau`` and ``weight * tau``; ``a_i = tau_i`` for plain SGD without momentum."""

    name = "fednova"
    stateful = False

    def __init__(self, cfg: FedNovaConfig) -> None:
        self.cfg = cfg
        self.server_round = 0  # server updates so far: where the server_lr schedule is

    def sum_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        return {"delta": numel, "tau": 1}

    # plain local SGD, as FedAvg's clients: no state, nothing added to the gradient
    broadcast_numel = FedAvg.broadcast_numel
    client_state_sizes = FedAvg.client_state_sizes
    client_grad_hook = FedAvg.client_grad_hook

    def client_updates(self, group: ClientGroup) -> ClientUpdates:
        # each delta normalised by its steps tau_i and weighted; beside it, the weighted tau_i
        rows = {"delta": group.deltas(), "tau": group.steps[:, None]}
        return ClientUpdates(rows, {"delta": group.weights / group.steps, "tau": group.weights}, {})

    def server_update(self, global_state: Tensor, sums: Mapping[str, Tensor], n_params: int) -> None:
        weight = float(sums["weight"])
        tau_eff = float(sums["tau"]) / weight
        lr = self.cfg.server_lr * self.cfg.server_lr_schedule.factor(self.server_round)
        global_state.add_(sums["delta"], alpha=lr * tau_eff / weight)
        self.server_round += 1

    def state_dict(self) -> dict[str, Tensor]:
        return {"server_round": torch.tensor(self.server_round)}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.server_round = int(state["server_round"]) if "server_round" in state else 0
