"""What decentralised algorithms share: a node's round as two halves around its neighbours' messages.

In decentralised training there is no server. Every node ``i`` keeps its own model ``x_i`` (and momentum
``m_i``), and each round it takes one stochastic gradient ``g_i`` at ``x_i`` on a batch of ``batch_size`` of its
own data, :meth:`GossipRule.send` s a message to its neighbours, and :meth:`GossipRule.combine` s its new
model from ``sum_j W_ij msg_j`` (``W`` the topology's mixing matrix,
:mod:`fedsim.decentralised.topology`). A rule works on the parameter part of the flat model; the round driver
(:mod:`fedsim.decentralised.gossip`) mixes float buffers as they
are. Each rule is one file: :mod:`~fedsim.algorithms.dpsgd`, :mod:`~fedsim.algorithms.dmsgd`,
:mod:`~fedsim.algorithms.decentlam`.
"""

from __future__ import annotations

from typing import ClassVar, Protocol, runtime_checkable

from pydantic import Field
from torch import Tensor

from fedsim.config.algorithm import AlgorithmBase


class GossipConfig(AlgorithmBase):
    """One stochastic gradient per node and round, on a batch of ``batch_size``, at learning rate ``lr`` (its
    schedule by round); ``weight_decay`` adds ``weight_decay * x`` to the gradient. A gossiping node has no
    local epochs, client optimiser or aggregation weight: those are a federated client's."""

    weight_decay: float = Field(0.0, ge=0, description="adds weight_decay * x to each gradient")
    decentralised: ClassVar[bool] = True
    over_topology: ClassVar[bool] = True


class MomentumGossipConfig(GossipConfig):
    """A gossip rule with momentum ``beta`` kept per node (DmSGD, DecentLaM)."""

    momentum: float = Field(0.9, ge=0, lt=1, description="beta")


@runtime_checkable
class GossipRule(Protocol):
    """A decentralised algorithm's update, over the parameter vector of one node (all on its device)."""

    name: str
    keeps_momentum: bool  # whether each node keeps a momentum vector between rounds

    def send(self, x: Tensor, m: Tensor | None, g: Tensor, lr: float) -> tuple[Tensor, dict[str, Tensor]]:
        """The message node i sends its neighbours this round (parameters), and what it keeps until it has heard
        from them; ``m`` is its momentum (zeros at first; None for a rule without)."""
        ...

    def combine(self, mixed: Tensor, x: Tensor, kept: dict[str, Tensor], lr: float) -> tuple[Tensor, Tensor | None]:
        """Node i's new parameters and momentum from ``mixed = sum_j W_ij msg_j``, its own ``x`` and ``kept``."""
        ...
