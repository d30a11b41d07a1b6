"""FL algorithms, one file each, behind the :class:`~fedsim.algorithms.base.Algorithm` protocol.

Adding an algorithm means adding its file and one line to ``REGISTRY``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fedsim.algorithms.base import Algorithm
from fedsim.algorithms.ditto import Ditto
from fedsim.algorithms.fedavg import FedAvg
from fedsim.algorithms.fednova import FedNova
from fedsim.algorithms.fedopt import FedAdam, FedAvgM, FedYogi
from fedsim.algorithms.fedprox import FedProx
from fedsim.algorithms.scaffold import Scaffold
from fedsim.config import AlgorithmConfig

REGISTRY: dict[str, Callable[[Any, int], Algorithm]] = {
    "fedavg": lambda cfg, n: FedAvg(cfg),
    "fedprox": lambda cfg, n: FedProx(cfg),
    "fednova": lambda cfg, n: FedNova(cfg),
    "scaffold": Scaffold,
    "ditto": lambda cfg, n: Ditto(cfg),
    "fedadam": lambda cfg, n: FedAdam(cfg),
    "fedyogi": lambda cfg, n: FedYogi(cfg),
    "fedavgm": lambda cfg, n: FedAvgM(cfg),
}


def build_algorithm(cfg: AlgorithmConfig, num_clients: int) -> Algorithm:
    """The algorithm named ``cfg.name``; ``num_clients`` is the population size (SCAFFOLD needs it)."""
    return REGISTRY[cfg.name](cfg, num_clients)
