"""FedAdam, FedYogi and FedAdagrad: Reddi et al., "Adaptive Federated Optimization" (ICLR 2021), Algorithm 2.

With the mean update ``delta`` (their ``Delta_t``): ``m = b1 m + (1 - b1) delta``; the second moment is
FedAdagrad's ``v = v + delta^2``, FedYogi's ``v = v - (1 - b2) delta^2 sign(v - delta^2)`` or FedAdam's
``v = b2 v + (1 - b2) delta^2``; ``x += lr * m / (sqrt(v) + tau)``. As written there: no bias correction,
``tau`` outside the square root, ``m`` starting at 0 and ``v`` at ``tau^2``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from fedsim.algorithms.server.base import Moments, ServerOptimizerContext
from fedsim.config.server_optimizer import (
    AdaptiveServer,
    FedAdagradServer,
    FedAdamServer,
    FedYogiServer,
    register_server_optimizer,
)


class Adaptive:
    def __init__(self, cfg: AdaptiveServer, context: ServerOptimizerContext) -> None:
        self.cfg = cfg
        self.moments = Moments(("m", "v"), {"v": cfg.tau**2})

    def _second_moment(self, v: Tensor, d2: Tensor) -> None:
        raise NotImplementedError

    def step_(self, x: Tensor, delta: Tensor, lr: float) -> None:
        cfg, state = self.cfg, self.moments.on(x)
        m, v = state["m"], state["v"]
        m.mul_(cfg.beta1).add_(delta, alpha=1 - cfg.beta1)
        self._second_moment(v, delta * delta)
        x.addcdiv_(m, v.sqrt().add_(cfg.tau), value=lr)

    def state_dict(self) -> dict[str, Tensor]:
        return self.moments.state_dict()

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.moments.load_state_dict(state)


@register_server_optimizer(FedAdamServer)
class FedAdam(Adaptive):
    def _second_moment(self, v: Tensor, d2: Tensor) -> None:
        v.mul_(self.cfg.beta2).add_(d2, alpha=1 - self.cfg.beta2)


@register_server_optimizer(FedYogiServer)
class FedYogi(Adaptive):
    def _second_moment(self, v: Tensor, d2: Tensor) -> None:
        v.sub_(torch.sign(v - d2).mul_(d2), alpha=1 - self.cfg.beta2)


@register_server_optimizer(FedAdagradServer)
class FedAdagrad(Adaptive):
    def _second_moment(self, v: Tensor, d2: Tensor) -> None:
        v.add_(d2)
