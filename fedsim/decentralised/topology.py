"""The graph decentralised nodes gossip over, as its mixing matrix ``W`` row by row (never n x n in memory).

Row ``i`` lists the nodes ``j`` that node ``i`` hears from with their weights ``W_ij`` (itself included), so
node i's mixed model is ``sum_j W_ij msg_j``; column ``j`` (:meth:`Topology.receivers`) lists who hears ``j``.
Every matrix here is doubly stochastic (rows and columns sum to 1), so the average model moves only by the
nodes' own steps; the undirected ones are symmetric.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from fedsim.config import ConfigError
from fedsim.config.topology import TopologyConfig


class Topology:
    """``rows[i]``: (j, W_ij) sorted by j, i's own weight included; ``receivers[j]``: who hears j (not j)."""

    def __init__(self, kind: str, rows: list[list[tuple[int, float]]]) -> None:
        self.kind, self.rows, self.n = kind, rows, len(rows)
        receivers: list[list[int]] = [[] for _ in rows]
        for i, row in enumerate(rows):
            for j, _ in row:
                if j != i:
                    receivers[j].append(i)
        self.receivers = receivers

    @classmethod
    def build(cls, cfg: TopologyConfig, n: int) -> Topology:
        """The ``cfg.kind`` graph on ``n`` nodes; a ConfigError says why it cannot be built."""
        if cfg.kind == "complete":
            return cls(cfg.kind, [[(j, 1.0 / n) for j in range(n)] for _ in range(n)])
        if cfg.kind == "exponential" and cfg.directed:  # Ying et al. 2021: i hears from i - 2^k, k < ceil(log2 n)
            hops = _hops(n)
            weight = 1.0 / (len(hops) + 1)
            return cls(cfg.kind, [sorted([(i, weight)] + [((i - h) % n, weight) for h in hops]) for i in range(n)])
        return cls(cfg.kind, _metropolis(_neighbours(cfg, n)))

    @classmethod
    def identity(cls, n: int) -> Topology:
        """No mixing: every node keeps its own model (LGD between its elections)."""
        return cls("none", [[(i, 1.0)] for i in range(n)])

    def mix(self, i: int, message: Callable[[int], Tensor]) -> Tensor:
        """``sum_j W_ij message(j)``, added in the order of j (the same sum on any number of ranks)."""
        total: Tensor | None = None
        for j, w in self.rows[i]:
            term = message(j) * w
            total = term if total is None else total.add_(term)
        assert total is not None
        return total

    def dense(self) -> Tensor:
        """``W`` as an n x n float64 matrix (for tests and the dashboard's small graphs)."""
        w = torch.zeros((self.n, self.n), dtype=torch.float64, device="cpu")
        for i, row in enumerate(self.rows):
            for j, v in row:
                w[i, j] = v
        return w

    def edges(self) -> list[tuple[int, int]]:
        """Every (sender, receiver) pair, sender != receiver."""
        return [(j, i) for j, heard in enumerate(self.receivers) for i in heard]


def _hops(n: int) -> list[int]:
    """The exponential graph's hops on ``n`` nodes: 2^k for k < ceil(log2 n)."""
    return [2**k for k in range(math.ceil(math.log2(n)))] if n > 1 else []


def _neighbours(cfg: TopologyConfig, n: int) -> list[set[int]]:
    """The undirected graphs' neighbour sets (without the node itself)."""
    if cfg.kind == "ring":
        return [{(i - 1) % n, (i + 1) % n} - {i} for i in range(n)]
    if cfg.kind == "exponential":  # undirected: i and i +- 2^k, k < ceil(log2 n)
        return [{(i + s * h) % n for h in _hops(n) for s in (1, -1)} - {i} for i in range(n)]
    if cfg.kind == "torus":
        rows = cfg.rows or max(r for r in range(1, math.isqrt(n) + 1) if n % r == 0)
        if n % rows:
            raise ConfigError(f"topology.rows={rows} does not divide the {n} nodes (data.clients) into a grid")
        cols = n // rows

        def at(r: int, c: int) -> int:
            return (r % rows) * cols + c % cols

        return [
            {at(i // cols + dr, i % cols + dc) for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1))} - {i} for i in range(n)
        ]
    if cfg.kind == "random_regular":
        if cfg.degree >= n or (n * cfg.degree) % 2:
            raise ConfigError(
                f"topology.degree={cfg.degree}: a random regular graph on {n} nodes needs degree < {n} and"
                " degree x nodes even"
            )
        import networkx  # loaded only for this graph (torch depends on it)

        graph = networkx.random_regular_graph(cfg.degree, n, seed=cfg.seed)
        return [set(graph.neighbors(i)) for i in range(n)]
    raise ConfigError(f"topology.kind={cfg.kind} is not a graph")


def _metropolis(neighbours: list[set[int]]) -> list[list[tuple[int, float]]]:
    """Metropolis-Hastings weights ``W_ij = 1 / (1 + max(d_i, d_j))`` for each edge, the rest of the row on the
    node itself: symmetric and doubly stochastic for any undirected graph."""
    rows = []
    for i, near in enumerate(neighbours):
        row = {j: 1.0 / (1 + max(len(near), len(neighbours[j]))) for j in near}
        row[i] = 1.0 - sum(row.values())
        rows.append(sorted(row.items()))
    return rows
