"""Adam on the server (Kingma and Ba, 2015), the step of torch.optim.Adam on the gradient ``-delta``.

``m = b1 m + (1 - b1) delta``; ``v = b2 v + (1 - b2) delta^2``; after ``t`` steps
``x += lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)``; ``m`` and ``v`` start at zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor

from fedsim.algorithms.server.base import Moments, ServerOptimizerContext
from fedsim.config.server_optimizer import AdamServer, register_server_optimizer


@register_server_optimizer(AdamServer)
class Adam:
    def __init__(self, cfg: AdamServer, context: ServerOptimizerContext) -> None:
        self.cfg = cfg
        self.moments = Moments(("m", "v"))
        self.t = 0

    def step_(self, x: Tensor, delta: Tensor, lr: float) -> None:
        cfg, state = self.cfg, self.moments.on(x)
        self.t += 1
        m, v = state["m"], state["v"]
        m.mul_(cfg.beta1).add_(delta, alpha=1 - cfg.beta1)
        v.mul_(cfg.beta2).addcmul_(delta, delta, value=1 - cfg.beta2)
        denom = v.sqrt().div_(math.sqrt(1 - cfg.beta2**self.t)).add_(cfg.eps)
        x.addcdiv_(m, denom, value=lr / (1 - cfg.beta1**self.t))

    def state_dict(self) -> dict[str, Tensor]:
        return {**self.moments.state_dict(), "t": torch.tensor(self.t, device="cpu")}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.moments.load_state_dict(state)
        self.t = int(state["t"]) if "t" in state else 0
