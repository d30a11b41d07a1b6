"""MNIST, federated: 100 clients with Dirichlet(0.3) label skew, LEAF's FEMNIST CNN, FedAvg.

Every round samples ``--per-round`` clients, each trains 1 local epoch of batch 32 at lr 0.05 (the fused
executor, 2 threads by default); the global model is evaluated on the 10,000 test images every 2 rounds and
the run stops at ``--target`` test accuracy or after ``--rounds``. Prints one JSON line: the rounds and
wall-clock seconds it took, and the accuracy reached. Needs ../shared/data/mnist (or ``--dir``).

    python bench/mnist.py [--target 0.97] [--rounds 60] [--per-round 20] [--clients 100] [--executor auto] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

from fedsim import RoundResult, Simulation

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=ROOT.parent / "shared" / "data" / "mnist")
    parser.add_argument("--target", type=float, default=0.97)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--per-round", type=int, default=20)
    parser.add_argument("--clients", type=int, default=100, help="clients the training set is split among")
    parser.add_argument("--executor", default="auto")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    config = {
        "name": "mnist-femnist-cnn",
        "seed": 0,
        "rounds": args.rounds,
        "clients_per_round": args.per_round,
        "eval_every": 2,
        "threads": args.threads,
        "progress": False,
        "executor": {"kind": args.executor, "clients": args.per_round},
        "data": {
            "dataset": "mnist",
            "dir": str(args.dir),
            "clients": args.clients,
            "partition": {"kind": "dirichlet", "alpha": 0.3},
        },
        "model": {"kind": "femnist_cnn"},
        "algorithm": {"kind": "fedavg", "lr": 0.05, "local_epochs": 1, "batch_size": 32},
    }
    curve: list[tuple[int, float]] = []

    def until_target(sim: Simulation, result: RoundResult) -> bool:
        accuracy = result.metrics.get("test_accuracy")
        if accuracy is None:  # not an evaluated round
            return False
        curve.append((result.round, round(accuracy, 4)))
        return accuracy >= args.target

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        sim = Simulation(config, callbacks=[until_target], out=Path(tmp) / "out", db=Path(tmp) / "runs.db")
        summary = sim.run()
        wall = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "bench": "mnist",
                "clients": args.clients,
                "partition": "dirichlet(0.3)",
                "model": "femnist_cnn",
                "per_round": args.per_round,
                "executor": summary.executor,
                "threads": args.threads,
                "rounds": summary.rounds,
                "final_accuracy": round(summary.final_accuracy, 4),
                "target": args.target,
                "reached": summary.final_accuracy >= args.target,
                "wall_s": round(wall, 1),
                "curve": curve,
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main()
