"""Speed-up of a compute-heavy round from 1 to 2 CPU ranks (gloo), the same config and work on both.

Workload: 200 clients x 64 random 28x28 images, 10 classes, a GroupNorm CNN with 32/64 channels, 1 local
epoch of batch 16, FedAvg, every client every round, 3 rounds, one torch thread per rank. Both runs use
``devices: 2``; with 1 rank one process trains both devices' clients, with 2 ranks each has its own process
and the sums meet in one all-reduce per round. Time is the summary's ``rounds_s`` (rounds only, no start-up).

    python bench/scaling.py [--clients 200] [--rounds 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from fedsim.api.launch import execute
from fedsim.config import parse_config


def rounds_seconds(ranks: int, clients: int, rounds: int, workdir: Path) -> float:
    cfg = parse_config(
        {
            "name": f"scaling-{ranks}",
            "rounds": rounds,
            "eval_every": 0,
            "threads": 1,
            "devices": 2,
            "progress": False,
            "data": {"dataset": "random", "clients": clients, "samples_per_client": 64, "features": 784},
            "model": {"kind": "cnn", "norm": "group", "channels": [32, 64]},
            "algorithm": {"kind": "fedavg", "lr": 0.05, "batch_size": 16},
        }
    )
    return execute(cfg, workdir / f"r{ranks}", workdir / "fedsim.db", ranks=ranks).rounds_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    one, two = [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            one.append(rounds_seconds(1, args.clients, args.rounds, Path(tmp)))
            two.append(rounds_seconds(2, args.clients, args.rounds, Path(tmp)))
    print(
        json.dumps(
            {
                "bench": "scaling",
                "device": "cpu",
                "backend": "gloo",
                "clients": args.clients,
                "rounds": args.rounds,
                "repeats": args.repeats,
                "one_rank_s": round(statistics.median(one), 3),
                "two_ranks_s": round(statistics.median(two), 3),
                "speedup": round(statistics.median(a / b for a, b in zip(one, two, strict=True)), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
