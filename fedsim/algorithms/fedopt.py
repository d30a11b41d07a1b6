"""FedOpt server optimisers (Reddi et al., ICLR 2021, "Adaptive Federated Optimization").

Clients run FedAvg's local SGD; the server treats the weighted mean delta ``Delta`` as a pseudo-gradient
step direction on the parameters and applies Adam, Yogi or heavy-ball momentum to it. Float buffers
(BatchNorm statistics) are not parameters and are simply averaged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.algorithms.fedavg import FedAvg
from fedsim.config import AlgorithmConfig, LrSchedule


class FedAdamConfig(AlgorithmConfig):
    name: Literal["fedadam", "fedyogi"]
    server_lr: float = Field(0.01, gt=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.99, ge=0, lt=1)
    tau: float = Field(1e-3, gt=0, description="adaptivity (epsilon) of Reddi et al. 2021")
    server_lr_schedule: LrSchedule = LrSchedule()


class FedAvgMConfig(AlgorithmConfig):
    name: Literal["fedavgm"]
    server_lr: float = Field(1.0, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)
    server_lr_schedule: LrSchedule = LrSchedule()


class _FedOpt:
    """Shared client half and bookkeeping; subclasses only define :meth:`_step` on the parameter segment."""

    name = "fedopt"
    stateful = False

    def __init__(self, cfg: FedAdamConfig | FedAvgMConfig) -> None:
        self.cfg = cfg
        self.m: Tensor | None = None
        self.v: Tensor | None = None
        self.server_round = 0  # server updates so far: where the server_lr schedule is

    def sum_sizes(self, numel: int, n_params: int) -> dict[str, int]:
        return {"delta": numel}

    def broadcast_numel(self, numel: int, n_params: int) -> int:
        return 0

    # the client half is FedAvg's: local SGD, weighted deltas summed
    client_state_sizes = FedAvg.client_state_sizes
    client_grad_hook = FedAvg.client_grad_hook
    client_updates = FedAvg.client_updates

    def server_update(self, global_state: Tensor, sums: Mapping[str, Tensor], n_params: int) -> None:
        mean = sums["delta"] / float(sums["weight"])
        global_state[n_params:].add_(mean[n_params:])
        if self.m is None or self.v is None:
            self.m = torch.zeros(n_params, device=global_state.device)
            self.v = torch.full((n_params,), self._v0(), device=global_state.device)
        elif self.m.device != global_state.device:  # restored from a checkpoint, which is read on the host
            self.m, self.v = self.m.to(global_state.device), self.v.to(global_state.device)
        lr = self.cfg.server_lr * self.cfg.server_lr_schedule.factor(self.server_round)
        self._step(global_state[:n_params], mean[:n_params], lr)
        self.server_round += 1

    def _v0(self) -> float:
        return 0.0

    def _step(self, x: Tensor, delta: Tensor, lr: float) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Tensor]:
        moments = {k: t.clone() for k, t in (("m", self.m), ("v", self.v)) if t is not None}
        return {**moments, "server_round": torch.tensor(self.server_round)}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.m = state["m"].clone() if "m" in state else None
        self.v = state["v"].clone() if "v" in state else None
        self.server_round = int(state["server_round"]) if "server_round" in state else 0


class FedAdam(_FedOpt):
    """``m = b1 m + (1-b1) D``; ``v = b2 v + (1-b2) D^2``; ``x += lr m / (sqrt(v) + tau)``; v starts at tau^2."""

    name = "fedadam"

    cfg: FedAdamConfig  # read at each use: Simulation.set may replace it mid-run

    def _v0(self) -> float:
        return self.cfg.tau**2

    def _second_moment(self, v: Tensor, d2: Tensor) -> None:
        v.mul_(self.cfg.beta2).add_(d2, alpha=1 - self.cfg.beta2)

    def _step(self, x: Tensor, delta: Tensor, lr: float) -> None:
        assert self.m is not None and self.v is not None
        self.m.mul_(self.cfg.beta1).add_(delta, alpha=1 - self.cfg.beta1)
        self._second_moment(self.v, delta * delta)
        x.addcdiv_(self.m, self.v.sqrt().add_(self.cfg.tau), value=lr)


class FedYogi(FedAdam):
    """Adam with Yogi's additive second moment: ``v = v - (1-b2) D^2 sign(v - D^2)``."""

    name = "fedyogi"

    def _second_moment(self, v: Tensor, d2: Tensor) -> None:
        v.sub_(torch.sign(v - d2).mul_(d2), alpha=1 - self.cfg.beta2)


class FedAvgM(_FedOpt):
    """Server momentum (Hsu et al. 2019): ``m = momentum m + D``; ``x += lr m``."""

    name = "fedavgm"

    cfg: FedAvgMConfig

    def _step(self, x: Tensor, delta: Tensor, lr: float) -> None:
        assert self.m is not None
        self.m.mul_(self.cfg.momentum).add_(delta)
        x.add_(self.m, alpha=lr)
