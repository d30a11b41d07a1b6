"""Adagrad on the server (Duchi et al., 2011), the step of torch.optim.Adagrad (no lr decay) on ``-delta``.

``s = s + delta^2`` (``s`` starts at ``initial_accumulator_value``); ``x += lr * delta / (sqrt(s) + eps)``.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from fedsim.algorithms.server.base import Moments, ServerOptimizerContext
from fedsim.config.server_optimizer import AdagradServer, register_server_optimizer


@register_server_optimizer(AdagradServer)
class Adagrad:
    def __init__(self, cfg: AdagradServer, context: ServerOptimizerContext) -> None:
        self.cfg = cfg
        self.moments = Moments(("sum",), {"sum": cfg.initial_accumulator_value})

    def step_(self, x: Tensor, delta: Tensor, lr: float) -> None:
        total = self.moments.on(x)["sum"]
        total.addcmul_(delta, delta)
        x.addcdiv_(delta, total.sqrt().add_(self.cfg.eps), value=lr)

    def state_dict(self) -> dict[str, Tensor]:
        return self.moments.state_dict()

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.moments.load_state_dict(state)
