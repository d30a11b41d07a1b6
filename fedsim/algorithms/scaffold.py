"""SCAFFOLD (Karimireddy et al., ICML 2020) with option II control variates.

Each client corrects its local gradient by ``c - c_i`` (server minus client control variate), which removes
the client drift that label skew causes. ``c_i`` is per-client state; ``c`` lives here and is updated by every
device from the same global sums.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch
from torch import Tensor

from fedsim.algorithms.base import MeanUpdate
from fedsim.algorithms.fedavg import mean_delta
from fedsim.algorithms.group import ClientGroup, ClientUpdates, GroupHook
from fedsim.config import AlgorithmConfig


class ScaffoldConfig(AlgorithmConfig):
    kind: Literal["scaffold"]


class Scaffold:
    """Sums ``weight * (y_i - x)`` over the model state and the unweighted ``c_i_new - c_i`` over parameters."""

    name = "scaffold"
    stateful = True

    def __init__(self, cfg: ScaffoldConfig, num_clients: int) -> None:
        self.cfg = cfg
        self.num_clients = num_clients
        self.c: Tensor | None = None

    def sum_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        return {"delta": numel, "control": n_params}

    def broadcast_numel(self, numel: int, n_params: int) -> int:
        return n_params

    def client_state_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        return {"c": n_params}

    def client_grad_hook(self, group: ClientGroup) -> GroupHook | None:
        correction = self._server_c(group.n_params, group.global_state.device) - group.states["c"]  # (K, n_params)

        def corrected(params: Tensor, grad: Tensor, lo: int, hi: int) -> None:
            grad.add_(correction[:, lo:hi].reshape(params.shape))

        return corrected

    def client_updates(self, group: ClientGroup) -> ClientUpdates:
        c = self._server_c(group.n_params, group.global_state.device)
        deltas = group.deltas()
        # option II per client: c_i+ = c_i - c + (x - y_i) / (K_i * lr)  =>  c_i+ - c_i = -delta / (K_i * lr) - c
        control = deltas[:, : group.n_params].div((-group.steps * group.lr)[:, None]).sub_(c)
        new_c = group.states["c"] + control
        ones = torch.ones_like(group.weights)  # control-variate deltas are summed unweighted
        return ClientUpdates(
            {"delta": deltas, "control": control}, {"delta": group.weights, "control": ones}, {"c": new_c}
        )

    def server_update(self, global_state: Tensor, sums: Mapping[str, Tensor], n_params: int) -> MeanUpdate:
        self._server_c(n_params, global_state.device).add_(sums["control"], alpha=1.0 / self.num_clients)
        return mean_delta(sums)

    def state_dict(self) -> dict[str, Tensor]:
        return {} if self.c is None else {"c": self.c.clone()}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.c = state["c"].clone() if "c" in state else None

    def _server_c(self, n_params: int, device: torch.device) -> Tensor:
        """The server's control variate, on ``device`` (where the replica and the global model live)."""
        if self.c is None:
            self.c = torch.zeros(n_params, device=device)
        elif self.c.device != device:  # restored from a checkpoint, which is read on the host
            self.c = self.c.to(device)
        return self.c
