"""FedNova (Wang et al., NeurIPS 2020) for local SGD: normalise each delta by its number of local steps.

Clients that take more steps (more data, more epochs) no longer pull the average towards their own optimum;
the server rescales the averaged normalised direction by the effective number of steps ``tau_eff``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.algorithms.base import ClientContext, ClientResult, ClientState
from fedsim.algorithms.fedavg import weighted_delta
from fedsim.algorithms.fused import FusedGroup, FusedHook
from fedsim.algorithms.local_sgd import local_sgd
from fedsim.config import AlgorithmConfig
from fedsim.data.base import ClientData
from fedsim.models.replica import Replica


class FedNovaConfig(AlgorithmConfig):
    name: Literal["fednova"]
    server_lr: float = Field(1.0, gt=0)


class FedNova:
    """Sums ``weight * delta / tau`` and ``weight * tau``; ``a_i = tau_i`` for plain SGD without momentum."""

    name = "fednova"
    stateful = False

    def __init__(self, cfg: FedNovaConfig) -> None:
        self.cfg = cfg

    def sum_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        return {"delta": numel, "tau": 1}

    def broadcast_numel(self, numel: int, n_params: int) -> int:
        return 0

    def client_update(
        self, replica: Replica, data: ClientData, state: ClientState | None, ctx: ClientContext
    ) -> ClientResult:
        stats = local_sgd(replica, data, self.cfg, ctx)
        tau = float(stats.steps)
        normalised = weighted_delta(replica, ctx).div_(tau)
        sums = {"delta": normalised, "tau": torch.full((1,), ctx.weight * tau, device=replica.flat.device)}
        return ClientResult(sums, stats.loss, stats.samples, stats.steps)

    def fused_state_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        return {}

    def fused_grad_hook(self, group: FusedGroup) -> FusedHook | None:
        return None

    def fused_sums(self, group: FusedGroup) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        normalised = (group.weights / group.steps) @ group.deltas()
        return {"delta": normalised, "tau": (group.weights * group.steps).sum().reshape(1)}, {}

    def server_update(self, global_state: Tensor, sums: Mapping[str, Tensor], n_params: int) -> None:
        weight = float(sums["weight"])
        tau_eff = float(sums["tau"]) / weight
        global_state.add_(sums["delta"], alpha=self.cfg.server_lr * tau_eff / weight)

    def state_dict(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        return None
