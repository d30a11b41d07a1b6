"""D-PSGD (Lian et al., NeurIPS 2017): ``x_i <- sum_j W_ij x_j - lr g_i(x_i)``.

Every node sends its model, averages its neighbours' and takes its own gradient step from there: the baseline
of decentralised SGD. On the complete graph it is minibatch SGD over all nodes' batches.
"""

from __future__ import annotations

from typing import Literal

from torch import Tensor

from fedsim.algorithms.gossip import GossipConfig


class DpsgdConfig(GossipConfig):
    kind: Literal["dpsgd"]


class Dpsgd:
    name = "dpsgd"
    keeps_momentum = False

    def __init__(self, cfg: DpsgdConfig) -> None:
        self.cfg = cfg

    def send(self, x: Tensor, m: Tensor | None, g: Tensor, lr: float) -> tuple[Tensor, dict[str, Tensor]]:
        return x, {"g": g}

    def combine(self, mixed: Tensor, x: Tensor, kept: dict[str, Tensor], lr: float) -> tuple[Tensor, Tensor | None]:
        return mixed - lr * kept["g"], None
