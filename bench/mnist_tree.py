"""The MNIST federated setting the privacy, SecAgg+ and robustness benchmarks share: the small GroupNorm CNN,
FedAvg with 1 local epoch of batch 16 at lr 0.05, Dirichlet label skew, no evaluation until the last round.
(Imported by the scripts beside it, which ``python bench/NAME.py`` puts on the path.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def mnist_tree(
    name: str, data_dir: Path, clients: int, alpha: float, per_round: int, rounds: int, threads: int
) -> dict[str, Any]:
    partition = {"kind": "dirichlet", "alpha": alpha}
    return {
        "name": name,
        "seed": 0,
        "rounds": rounds,
        "clients_per_round": per_round,
        "eval_every": 0,
        "threads": threads,
        "progress": False,
        "data": {"dataset": "mnist", "dir": str(data_dir), "clients": clients, "partition": partition},
        "model": {"kind": "cnn", "norm": "group", "groups": 4},
        "algorithm": {"kind": "fedavg", "lr": 0.05, "local_epochs": 1, "batch_size": 16},
    }
