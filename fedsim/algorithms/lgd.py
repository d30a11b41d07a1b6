"""LGD / multi-leader LSGD (Teng et al., NeurIPS 2019): each node takes its own gradient step and is pulled toward
the best node of its group (the local leader) and the best node of all (the global leader), "best" being the
lowest loss; only the leaders' models travel.

Every ``period`` rounds the nodes report their batch losses, the leaders are elected, and each node steps

    x_i <- (1 - local_pull - global_pull) x_i + local_pull x_local + global_pull x_global - lr g_i(x_i)

and in the other rounds ``x_i <- x_i - lr g_i(x_i)``: D-PSGD's update over a mixing matrix whose row i holds
the node and its two leaders (:meth:`Lgd.rows`), rebuilt at each election. A node's group is its device (node
i trains on device ``i % devices``, in the paper's terms the workers of one machine), or, with ``groups`` set,
one of that many contiguous blocks of nodes (regions).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, model_validator

from fedsim.algorithms.dpsgd import Dpsgd
from fedsim.algorithms.gossip import GossipConfig
from fedsim.config.base import Strict


class LeaderPulls(Strict):
    """LGD's knobs, the decentralised form's and the federated one's (:mod:`fedsim.algorithms.fedlgd`)."""

    local_pull: float = Field(0.1, ge=0, le=1, description="pull toward the group's leader")
    global_pull: float = Field(0.1, ge=0, le=1, description="pull toward the global leader")
    period: int = Field(1, ge=1, le=1_000_000, description="rounds between elections")

    @model_validator(mode="after")
    def _pulls_leave_the_node_a_share(self) -> LeaderPulls:
        if self.local_pull + self.global_pull > 1:
            raise ValueError(f"local_pull + global_pull = {self.local_pull + self.global_pull:g} exceeds 1")
        return self


class LgdConfig(GossipConfig, LeaderPulls):
    kind: Literal["lgd"]
    over_topology: ClassVar[bool] = False  # its graph is its leaders, elected every period
    groups: int | None = Field(None, ge=1, le=1_000_000, description="contiguous groups; default: by device")


class Lgd:
    name = "lgd"
    keeps_momentum = False

    def __init__(self, cfg: LgdConfig) -> None:
        self.cfg = cfg

    # a node's step is D-PSGD's; what differs is the graph: the leaders' rows, at each election
    send = Dpsgd.send
    combine = Dpsgd.combine

    def elects(self, r: int) -> bool:
        return (r + 1) % self.cfg.period == 0

    def group(self, i: int, n: int, devices: int) -> int:
        return i % devices if self.cfg.groups is None else i * min(self.cfg.groups, n) // n

    def rows(self, losses: list[float], devices: int = 1) -> list[list[tuple[int, float]]]:
        """Each node's mixing row after an election on ``losses`` (by node; ties to the lowest index)."""
        n = len(losses)
        best_of: dict[int, int] = {}
        for i in range(n):
            g = self.group(i, n, devices)
            if g not in best_of or losses[i] < losses[best_of[g]]:
                best_of[g] = i
        leader = min(range(n), key=lambda i: (losses[i], i))
        cfg = self.cfg
        rows = []
        for i in range(n):
            row = {i: 1.0 - cfg.local_pull - cfg.global_pull}
            for j, w in ((best_of[self.group(i, n, devices)], cfg.local_pull), (leader, cfg.global_pull)):
                row[j] = row.get(j, 0.0) + w
            rows.append(sorted((j, w) for j, w in row.items() if w > 0))
        return rows
