"""FL algorithms, one file each, behind the :class:`~fedsim.algorithms.base.Algorithm` protocol.

Adding an algorithm means adding its file and one line to ``REGISTRY``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fedsim.algorithms.base import Algorithm
from fedsim.algorithms.fedavg import FedAvg
from fedsim.config import AlgorithmConfig

REGISTRY: dict[str, Callable[[Any, int], Algorithm]] = {
    "fedavg": lambda cfg, n: FedAvg(cfg),
}


def build_algorithm(cfg: AlgorithmConfig, num_clients: int) -> Algorithm:
    """The algorithm named ``cfg.name``; ``num_clients`` is the population size (SCAFFOLD needs it)."""
    return REGISTRY[cfg.name](cfg, num_clients)
