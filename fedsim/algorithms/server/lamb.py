"""LAMB on the server (You et al., ICLR 2020, Algorithm 2), per parameter tensor.

On the gradient ``g = -delta``: Adam's moments and bias corrections give ``r = m_hat / (sqrt(v_hat) + eps)``;
with weight decay ``u = r + weight_decay * x``; each tensor ``l`` moves by ``x_l -= lr * ||x_l|| / ||u_l|| * u_l``
(the trust ratio is 1 where either norm is 0).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from fedsim.algorithms.server.base import Moments, ServerOptimizerContext
from fedsim.config.server_optimizer import LambServer, register_server_optimizer


@register_server_optimizer(LambServer)
class Lamb:
    def __init__(self, cfg: LambServer, context: ServerOptimizerContext) -> None:
        self.cfg, self.sizes = cfg, list(context.sizes)
        self.moments = Moments(("m", "v"))
        self.t = 0

    def step_(self, x: Tensor, delta: Tensor, lr: float) -> None:
        cfg, state = self.cfg, self.moments.on(x)
        self.t += 1
        grad = delta.neg()
        m, v = state["m"], state["v"]
        m.mul_(cfg.beta1).add_(grad, alpha=1 - cfg.beta1)
        v.mul_(cfg.beta2).addcmul_(grad, grad, value=1 - cfg.beta2)
        direction = (m / (1 - cfg.beta1**self.t)).div_((v / (1 - cfg.beta2**self.t)).sqrt_().add_(cfg.eps))
        direction.add_(x, alpha=cfg.weight_decay)
        for x_l, u_l in zip(x.split(self.sizes), direction.split(self.sizes), strict=True):
            x_norm, u_norm = torch.linalg.vector_norm(x_l), torch.linalg.vector_norm(u_l)
            ratio = torch.where((x_norm > 0) & (u_norm > 0), x_norm / u_norm, torch.ones_like(x_norm))
            x_l.sub_(u_l * ratio, alpha=lr)

    def state_dict(self) -> dict[str, Tensor]:
        return {**self.moments.state_dict(), "t": torch.tensor(self.t, device="cpu")}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.moments.load_state_dict(state)
        self.t = int(state["t"]) if "t" in state else 0
