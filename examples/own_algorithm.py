"""Your own algorithm: FedExP (Jhunjhunwala, Wang and Joshi, ICLR 2023), written here.

    python examples/own_algorithm.py                   # from Python: fedavg against fedexp
    fedsim run examples/own_algorithm.yaml             # from YAML: algorithm.factory names the class below

FedExP's clients are FedAvg's (local SGD; each sends its update ``Delta_i``) and also send ``||Delta_i||^2``;
the server extrapolates: it steps by ``eta * mean(Delta)`` with the step size of their Algorithm 1,

    eta = max(1, sum_i p_i ||Delta_i||^2 / (2 (||sum_i p_i Delta_i||^2 + epsilon)))

(``p_i`` the clients' aggregation weights, uniform in the paper), which grows when the clients' updates
disagree. The algorithm is written once over a leading client dimension K (``client_updates``), so both
executors run it, fused included; its ``server_update`` returns the mean update scaled by ``eta`` and the run's
``server_optimizer`` applies it. Nothing in fedsim is edited: ``register_algorithm`` below registers it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.algorithms.base import MeanUpdate
from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.group import ClientGroup, ClientUpdates
from fedsim.config import AlgorithmConfig, register_algorithm


class FedExpConfig(AlgorithmConfig):
    kind: Literal["fedexp"] = "fedexp"
    epsilon: float = Field(1e-3, gt=0, le=1e3, description="keeps the step finite when the mean update vanishes")


class FedExP:
    name = "fedexp"
    stateful = False

    def __init__(self, cfg: FedExpConfig, num_clients: int) -> None:
        self.cfg = cfg
        self.eta = 1.0  # the last server step size, for a look after a run

    def sum_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        return {"delta": numel, "sqnorm": 1}

    # FedAvg's clients: nothing broadcast beside the model, no client state, nothing added to the gradient
    broadcast_numel = FedAvg.broadcast_numel
    client_state_sizes = FedAvg.client_state_sizes
    client_grad_hook = FedAvg.client_grad_hook

    def client_updates(self, group: ClientGroup) -> ClientUpdates:
        deltas = group.deltas()  # (K, numel): local - global
        sqnorm = deltas[:, : group.n_params].square().sum(dim=1, keepdim=True)  # (K, 1): ||Delta_i||^2
        return ClientUpdates({"delta": deltas, "sqnorm": sqnorm}, {"delta": group.weights, "sqnorm": group.weights}, {})

    def server_update(self, global_state: Tensor, sums: Mapping[str, Tensor], n_params: int) -> MeanUpdate:
        weight = float(sums["weight"])
        mean = sums["delta"][:n_params] / weight
        spread = float(sums["sqnorm"]) / weight
        self.eta = max(1.0, spread / (2.0 * (float(mean @ mean) + self.cfg.epsilon)))
        return MeanUpdate(sums["delta"], weight, factor=self.eta)

    def state_dict(self) -> dict[str, Tensor]:
        return {"eta": torch.tensor(self.eta, dtype=torch.float64)}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.eta = float(state["eta"]) if "eta" in state else 1.0


register_algorithm(FedExpConfig, FedExP)


if __name__ == "__main__":
    from fedsim import Simulation

    for name in ("fedavg", "fedexp"):
        config = {
            "name": f"own-algorithm-{name}",
            "rounds": 15,
            "clients_per_round": 5,
            "progress": False,
            "data": {"dataset": "digits", "clients": 40, "partition": {"kind": "dirichlet", "alpha": 0.3}},
            "model": {"kind": "mlp", "hidden": [32]},
            "algorithm": {"kind": name, "lr": 0.1, "local_epochs": 2},
        }
        summary = Simulation(config, out=f"runs/own-algorithm-{name}").run()
        print(f"{name}: final_accuracy={summary.final_accuracy:.4f}")
