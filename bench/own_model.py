"""A model of your own through fedsim against a plain torch loop: ResNet-18 with GroupNorm on 32x32 images.

The workload: ``clients`` clients, each with ``samples`` random 3x32x32 images of 10 classes; ResNet-18-GN
(11.2M parameters) built by a user factory passed to ``fedsim.Simulation`` (``model=``), as a user would bring
their own; 1 local epoch, batch 16, SGD lr 0.05; FedAvg; every client every round. ``sim_s`` is the wall time of
the rounds (training, aggregation, run-store logging) without start-up; ``limit_s`` is the same number of SGD
steps on the same model and batch size in one plain torch loop (torch.optim.SGD) in this process. One
simulation runs ``rounds x repeats`` rounds; each repeat times ``rounds`` of them and then the same number of
plain steps, side by side, after two untimed warm-up steps. The run evaluates once, after its very last round
(on two images). The JSON line reports medians and ``efficiency = limit_s / sim_s``.

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
    # two test images: the run evaluates once, after its last round, and the plain loop does not evaluate
    test = ClientData(torch.from_numpy(x[:2]), torch.from_numpy(y[:2]))
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
        "algorithm": {"kind": "fedavg", "lr": 0.05, "local_epochs": 1, "batch_size": 16},
    }


class PlainLoop:
    """The same model, batch size and SGD in the plainest torch loop, built once."""

    def __init__(self, samples: int) -> None:
        self.model = my_resnet((3, 32, 32), 10)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.x = torch.randn(samples, 3, 32, 32)
        self.y = torch.randint(0, 10, (samples,))

    def seconds(self, steps: int) -> float:
        t0 = time.perf_counter()
        for step in range(steps):
            lo = (step * 16) % len(self.y)
            self.opt.zero_grad()
            F.cross_entropy(self.model(self.x[lo : lo + 16]), self.y[lo : lo + 16]).backward()
            self.opt.step()
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
    steps = args.rounds * args.clients * -(-args.samples // 16)
    plain = PlainLoop(args.samples)
    plain.seconds(2)  # the process's first convolutions pick their kernels: not timed for either side
    with tempfile.TemporaryDirectory() as tmp:
        sim = Simulation(
            config(args.clients, args.rounds * args.repeats, args.threads),
            model=my_resnet,
            data=images(args.clients, args.samples),
            out=Path(tmp) / "out",
            db=Path(tmp) / "fedsim.db",
        )
        sims, limits, ratios = [], [], []
        for rep in range(args.repeats):  # side by side: the rounds of one repeat, then the same steps plainly
            t0 = time.perf_counter()
            for r in range(rep * args.rounds, (rep + 1) * args.rounds):
                sim.engine.round(r)
            sims.append(time.perf_counter() - t0)
            limits.append(plain.seconds(steps))
            ratios.append(limits[-1] / sims[-1])
        sim.engine.close()
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
