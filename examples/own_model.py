"""Bring your own model and data: a model and a federated dataset written here, trained with fedsim.

    python examples/own_model.py

The model is a small two-layer network defined below (any torch.nn.Module whose parameters and float buffers
fedsim can lay out flat). The data are scikit-learn's bundled handwritten digits, split among 50 clients by a
Dirichlet(0.5) label skew, in fedsim's ArrayDataset. A callback halves the learning rate at round 10 and stops
the run once the test accuracy reaches 0.93.
"""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits
from torch import nn

from fedsim import RoundResult, Simulation
from fedsim.data.base import ArrayDataset, ClientData


class TinyNet(nn.Module):
    """64 pixels -> 64 hidden units -> 10 classes."""

    def __init__(self, input_shape: tuple[int, ...], num_classes: int, hidden: int = 64) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), hidden), nn.Tanh())
        self.head = nn.Linear(hidden, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


def digits_clients(clients: int, seed: int) -> ArrayDataset:
    """The digits split 80/20; the training part shared among ``clients`` clients with Dirichlet(0.5) skew."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))
    test, train = order[: len(y) // 5], order[len(y) // 5 :]
    proportions = rng.dirichlet([0.5] * clients, size=10)  # per class, each client's share
    parts: list[list[int]] = [[] for _ in range(clients)]
    for label in range(10):
        members = train[y[train] == label]
        cuts = (np.cumsum(proportions[label])[:-1] * len(members)).astype(int)
        for client, chunk in enumerate(np.split(rng.permutation(members), cuts)):
            parts[client].extend(chunk.tolist())
    test_data = ClientData(torch.from_numpy(x[test]), torch.from_numpy(y[test]).long())
    return ArrayDataset(x, y, [np.array(p, dtype=np.int64) for p in parts], test_data, num_classes=10)


def schedule(sim: Simulation, result: RoundResult) -> bool:
    if result.round == 10:
        sim.set("lr", sim.get("lr") / 2)
    return result.metrics.get("test_accuracy", 0.0) >= 0.93  # evaluated rounds only (eval_every)


CONFIG = {
    "name": "own-model",
    "seed": 0,
    "rounds": 60,
    "clients_per_round": 20,
    "eval_every": 5,
    "progress": False,
    "data": {"dataset": "digits", "clients": 50},  # the shape of the population; the data come from data=
    "algorithm": {"kind": "fedavg", "lr": 0.2, "local_epochs": 2, "batch_size": 16},
}


def main() -> None:
    sim = Simulation(CONFIG, model=TinyNet, data=digits_clients(50, seed=0), callbacks=[schedule])
    summary = sim.run()
    print(f"{summary.rounds} rounds, final_accuracy={summary.final_accuracy:.4f} -> {sim.out / 'summary.json'}")


if __name__ == "__main__":
    main()
