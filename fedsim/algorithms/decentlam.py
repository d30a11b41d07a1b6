"""DecentLaM (Yuan et al., ICCV 2021, Algorithm 1): decentralised momentum SGD whose momentum also carries the
consensus step, so that momentum no longer amplifies the inconsistency bias of DmSGD:

    m_i <- beta m_i + g_i(x_i) + (x_i - sum_j W_ij x_j) / lr
    x_i <- x_i - lr m_i

Each node sends its model, as in D-PSGD; the paper's claim is that it trains better than DmSGD, above all with
large batches (large rates), on heterogeneous data.
"""

from __future__ import annotations

from typing import Literal

from torch import Tensor

from fedsim.algorithms.gossip import MomentumGossipConfig


class DecentLaMConfig(MomentumGossipConfig):
    kind: Literal["decentlam"]


class DecentLaM:
    name = "decentlam"
    keeps_momentum = True

    def __init__(self, cfg: DecentLaMConfig) -> None:
        self.cfg = cfg

    def send(self, x: Tensor, m: Tensor | None, g: Tensor, lr: float) -> tuple[Tensor, dict[str, Tensor]]:
        assert m is not None
        return x, {"g": g, "m": m}

    def combine(self, mixed: Tensor, x: Tensor, kept: dict[str, Tensor], lr: float) -> tuple[Tensor, Tensor | None]:
        momentum = self.cfg.momentum * kept["m"] + kept["g"] + (x - mixed) / lr
        return x - lr * momentum, momentum
