"""FedNova (Wang et al., NeurIPS 2020) for local SGD: normalise each delta by its number of local steps.

Clients that take more steps (more data, more epochs) no longer pull the average towards their own optimum;
the server rescales the averaged normalised direction by the effective number of steps ``tau_eff``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from torch import Tensor

from fedsim.algorithms.base import MeanUpdate
from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.group import ClientGroup, ClientUpdates
from fedsim.config import AlgorithmConfig


class FedNovaConfig(AlgorithmConfig):
    kind: Literal["fednova"]


class FedNova:
    """Sums ``weight * delta / tau`` and ``weight * tau``; ``a_i = tau_i`` for plain SGD without momentum."""

    name = "fednova"
    stateful = False

    def __init__(self, cfg: FedNovaConfig) -> None:
        self.cfg = cfg

    def sum_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        return {"delta": numel, "tau": 1}

    # plain local SGD, as FedAvg's clients: no state, nothing added to the gradient; no server state either
    broadcast_numel = FedAvg.broadcast_numel
    client_state_sizes = FedAvg.client_state_sizes
    client_grad_hook = FedAvg.client_grad_hook
    state_dict = FedAvg.state_dict
    load_state_dict = FedAvg.load_state_dict

    def client_updates(self, group: ClientGroup) -> ClientUpdates:
        # each delta normalised by its steps tau_i and weighted; beside it, the weighted tau_i
        rows = {"delta": group.deltas(), "tau": group.steps[:, None]}
        return ClientUpdates(rows, {"delta": group.weights / group.steps, "tau": group.weights}, {})

    def server_update(self, global_state: Tensor, sums: Mapping[str, Tensor], n_params: int) -> MeanUpdate:
        """``tau_eff * sum(weight * delta / tau) / sum(weight)``, with ``tau_eff = sum(weight * tau) / sum(weight)``."""
        weight = float(sums["weight"])
        return MeanUpdate(sums["delta"], weight, factor=float(sums["tau"]) / weight)
