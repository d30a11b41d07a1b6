"""DmSGD, decentralised momentum SGD in its adapt-then-combine form (as DecentLaM, Yuan et al. 2021, states it,
eq. 3): ``m_i <- beta m_i + g_i(x_i)``, ``x_i <- sum_j W_ij (x_j - lr m_j)``.

Each node steps with its own momentum and then averages its neighbours' stepped models. With heterogeneous data
its fixed point is biased by the momentum (an inconsistency bias of order ``lr / (1 - beta)``), which grows with
the batch size's larger rates: what DecentLaM removes.
"""

from __future__ import annotations

from typing import Literal

from torch import Tensor

from fedsim.algorithms.gossip import MomentumGossipConfig


class DmsgdConfig(MomentumGossipConfig):
    kind: Literal["dmsgd"]


class Dmsgd:
    name = "dmsgd"
    keeps_momentum = True

    def __init__(self, cfg: DmsgdConfig) -> None:
        self.cfg = cfg

    def send(self, x: Tensor, m: Tensor | None, g: Tensor, lr: float) -> tuple[Tensor, dict[str, Tensor]]:
        assert m is not None
        momentum = self.cfg.momentum * m + g
        return x - lr * momentum, {"m": momentum}

    def combine(self, mixed: Tensor, x: Tensor, kept: dict[str, Tensor], lr: float) -> tuple[Tensor, Tensor | None]:
        return mixed, kept["m"]
