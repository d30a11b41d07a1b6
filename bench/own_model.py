"""A model of your own through fedsim against a plain torch loop: ResNet-18 with GroupNorm on 32x32 images.

The workload: ``clients`` clients, each with ``samples`` random 3x32x32 images of 10 classes; ResNet-18-GN
(11.2M parameters) built by a user factory passed to ``fedsim.Simulation`` (``model=``), as a user would bring
their own; 1 local epoch, batch 16, SGD lr 0.05; FedAvg; every client every round. ``sim_s`` is the wall time of
the rounds (training, aggregation, run-store logging) without start-up; ``limit_s`` is the same number of SGD
steps on the same model and batch size in one plain torch loop (torch.optim.SGD) in this process, measured
side by side in each repeat, after two untimed warm-up steps. The JSON line reports medians and ``efficiency = limit_s / sim_s``.

    python bench/own_model.py [--clients 4] [--samples 32] [--rounds 2] [--repeats 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedsim import Simulation
from fedsim.data.base import ArrayDataset, ClientData
from fedsim.models.resnet import resnet18_gn


def my_resnet(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The user's factory: any nn.Module."""
    return resnet18_gn(input_shape, num_classes, 32)


def images(clients: int, samples: int) -> ArrayDataset:
    rng = np.random.default_rng(0)
    n = clients * samples
    x = rng.standard_normal((n, 3, 32, 32), dtype=np.float32)
    y = rng.integers(0, 10, n)
    test = ClientData(torch.from_numpy(x[:32]), torch.from_numpy(y[:32]))
    return ArrayDataset(x, y, list(np.array_split(np.arange(n), clients)), test, num_classes=10)


def config(clients: int, rounds: int, threads: int) -> dict[str, object]:
    return {
        "name": "own-model",
        "seed": 0,
        "rounds": rounds,
        "eval_every": 0,
        "threads": threads,
        "progress": False,
        "data": {"dataset": "random", "clients": clients},  # stands in for data=: the clients come from there
        "algorithm": {"name": "fedavg", "lr": 0.05, "local_epochs": 1, "batch_size": 16},
    }


def simulate(clients: int, samples: int, rounds: int, threads: int, workdir: Path) -> tuple[float, int]:
    sim = Simulation(
        config(clients, rounds, threads),
        model=my_resnet,
        data=images(clients, samples),
        out=workdir / "out",
        db=workdir / "fedsim.db",
    )
    t0 = time.perf_counter()
    for r in range(rounds):
        sim.engine.round(r)
    sim_s = time.perf_counter() - t0
    sim.engine.close()
    return sim_s, rounds * clients * -(-samples // 16)


def plain_loop(steps: int, samples: int) -> float:
    model = my_resnet((3, 32, 32), 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(samples, 3, 32, 32)
    y = torch.randint(0, 10, (samples,))
    t0 = time.perf_counter()
    for step in range(steps):
        lo = (step * 16) % samples
        opt.zero_grad()
        F.cross_entropy(model(x[lo : lo + 16]), y[lo : lo + 16]).backward()
        opt.step()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    plain_loop(2, args.samples)  # the process's first convolutions pick their kernels: not timed for either side
    sims, limits, ratios = [], [], []
    steps = 0
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            sim_s, steps = simulate(args.clients, args.samples, args.rounds, args.threads, Path(tmp))
        limit_s = plain_loop(steps, args.samples)
        sims.append(sim_s)
        limits.append(limit_s)
        ratios.append(limit_s / sim_s)
    print(
        json.dumps(
            {
                "bench": "own_model",
                "model": "resnet18_gn (user factory)",
                "clients": args.clients,
                "samples": args.samples,
                "rounds": args.rounds,
                "steps": steps,
                "repeats": args.repeats,
                "sim_s": round(statistics.median(sims), 4),
                "limit_s": round(statistics.median(limits), 4),
                "efficiency": round(statistics.median(ratios), 4),
                "ratios": [round(r, 4) for r in ratios],
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
            }
        )
    )


if __name__ == "__main__":
    main()
