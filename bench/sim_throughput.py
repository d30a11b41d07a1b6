"""Workload W1: how close the simulator comes to a plain torch training loop.

W1: N clients (default 1000), each with 64 random samples of 784 float features and 10 classes; MLP
784-128-10; 1 local epoch, batch 16, SGD lr 0.05; FedAvg; every client trains every round; 2 rounds; one torch
thread. ``sim_s`` is the wall time of the rounds (sampling, training, aggregation, run-store logging) without
start-up and data generation; ``limit_s`` is the same number of SGD steps of the same model and batch size in
one plain torch loop in this process. Each repeat measures both side by side; the JSON line reports medians
and ``efficiency = limit_s / sim_s``.

    python bench/sim_throughput.py [--clients 1000] [--rounds 2] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from fedsim.config import parse_config
from fedsim.data.build import build_dataset
from fedsim.models import build_model
from fedsim.sim.rounds.engine import Engine


def w1_config(clients: int, rounds: int, lazy: bool = False) -> dict[str, Any]:
    """W1's run tree; ``lazy`` generates each client's data when it trains (population and memory benches)."""
    return {
        "name": "w1",
        "seed": 0,
        "rounds": rounds,
        "eval_every": 0,
        "threads": 1,
        "progress": False,
        "data": {
            "dataset": "random",
            "clients": clients,
            "samples_per_client": 64,
            "features": 784,
            "classes": 10,
            "test_samples": 256,
            **({"lazy": True} if lazy else {}),
        },
        "model": {"kind": "mlp", "hidden": [128]},
        "algorithm": {"kind": "fedavg", "lr": 0.05, "local_epochs": 1, "batch_size": 16},
    }


def plain_loop(steps: int, batch: int, seed: int) -> float:
    """Seconds for ``steps`` SGD steps of the W1 model in the plainest torch loop."""
    cfg = parse_config(w1_config(1, 1))
    model = build_model(cfg.model, (784,), 10, seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(64, 784)
    y = torch.randint(0, 10, (64,))
    t0 = time.perf_counter()
    for step in range(steps):
        lo = (step % 4) * batch
        opt.zero_grad()
        F.cross_entropy(model(x[lo : lo + batch]), y[lo : lo + batch]).backward()
        opt.step()
    return time.perf_counter() - t0


def simulate(clients: int, rounds: int, workdir: Path) -> tuple[float, int]:
    """Wall seconds of the rounds of W1 in fedsim, and the number of SGD steps they took."""
    cfg = parse_config(w1_config(clients, rounds))
    dataset = build_dataset(cfg.data, cfg.seed)
    engine = Engine(cfg, out_dir=workdir / "out", db_path=workdir / "fedsim.db", dataset=dataset)
    t0 = time.perf_counter()
    for r in range(rounds):
        engine.round(r)
    sim_s = time.perf_counter() - t0
    engine.close()
    steps = rounds * clients * -(-64 // 16)
    return sim_s, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sims, limits, ratios = [], [], []
    for rep in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            sim_s, steps = simulate(args.clients, args.rounds, Path(tmp))
        limit_s = plain_loop(steps, 16, seed=rep)
        sims.append(sim_s)
        limits.append(limit_s)
        ratios.append(limit_s / sim_s)
    print(
        json.dumps(
            {
                "bench": "sim_throughput",
                "workload": "W1",
                "clients": args.clients,
                "rounds": args.rounds,
                "steps": steps,
                "repeats": args.repeats,
                "sim_s": round(statistics.median(sims), 4),
                "limit_s": round(statistics.median(limits), 4),
                "efficiency": round(statistics.median(ratios), 4),
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
            }
        )
    )


if __name__ == "__main__":
    main()
