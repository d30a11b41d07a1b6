"""Decentralised training (``topology:``): each client is a node that keeps its own model and mixes it with its
neighbours' over a graph, instead of a server's sum."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from fedsim.config.base import Strict


class TopologyConfig(Strict):
    """The graph nodes gossip over, and its mixing matrix ``W`` (doubly stochastic):

    - ``ring``: each node and its two neighbours, 1/3 each;
    - ``torus``: a ``rows`` x (nodes / rows) grid wrapped at its edges, each node and its four neighbours, 1/5;
    - ``exponential``: the static exponential graph (Ying et al. 2021), node i hears from i - 2^k mod n for
      k < ceil(log2 n), each of them and itself weighing 1 / (ceil(log2 n) + 1) (directed); with
      ``directed: false``, i and i +- 2^k hear each other (symmetric, Metropolis weights), the form DecentLaM's
      analysis assumes (a symmetric W);
    - ``random_regular``: a random ``degree``-regular graph drawn from ``seed`` (networkx), Metropolis weights;
    - ``complete``: everyone, 1/n each (exact averaging: D-PSGD on it is minibatch SGD).

    By default every client is a node; with ``nodes`` set, each node is a contiguous block of the clients (a
    device group, a region: :class:`fedsim.data.blocks.ClientBlocks`) training on its block's data. ``nodes``
    also applies to LGD, which takes no graph.
    """

    kind: Literal["none", "ring", "torus", "exponential", "random_regular", "complete"] = Field(
        "none", description="the graph, as above; none: a federated run with a server"
    )
    degree: int = Field(4, ge=1, le=1_000_000, description="random_regular: neighbours per node")
    rows: int | None = Field(None, ge=1, le=1_000_000, description="torus: grid rows (default: nearest sqrt)")
    seed: int = Field(0, ge=0, description="random_regular: the graph's draw")
    directed: bool = Field(True, description="exponential: one-way hops (Ying et al.), or both ways (symmetric)")
    nodes: int | None = Field(
        None, ge=1, le=1_000_000, description="contiguous blocks of clients as nodes (device groups, regions)"
    )

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    @model_validator(mode="after")
    def _settings_fit_the_kind(self) -> TopologyConfig:
        if self.rows is not None and self.kind != "torus":
            raise ValueError(f"rows is the torus's; topology.kind is {self.kind}")
        if not self.directed and self.kind != "exponential":
            raise ValueError(f"directed is the exponential graph's; topology.kind is {self.kind}")
        return self
