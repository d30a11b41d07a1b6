"""SGD on the server, with heavy-ball momentum (FedAvgM, Hsu et al. 2019) and Nesterov's as torch.optim.SGD.

With the gradient ``g = -delta`` and dampening 0, torch's ``buf = momentum * buf + g; p -= lr * buf`` (Nesterov:
``p -= lr * (g + momentum * buf)``) is ``m = momentum * m + delta; x += lr * m`` here. Without momentum the
step keeps no state and :class:`~fedsim.algorithms.server.base.ServerStep` adds the update itself.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from fedsim.algorithms.server.base import Moments, ServerOptimizerContext
from fedsim.config.server_optimizer import SgdServer, register_server_optimizer


@register_server_optimizer(SgdServer)
class Sgd:
    def __init__(self, cfg: SgdServer, context: ServerOptimizerContext) -> None:
        self.cfg = cfg
        self.moments = Moments(("m",))

    def step_(self, x: Tensor, delta: Tensor, lr: float) -> None:
        m = self.moments.on(x)["m"]
        m.mul_(self.cfg.momentum).add_(delta)
        x.add_(delta.add(m, alpha=self.cfg.momentum) if self.cfg.nesterov else m, alpha=lr)

    def state_dict(self) -> dict[str, Tensor]:
        return self.moments.state_dict()

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.moments.load_state_dict(state)
