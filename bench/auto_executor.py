"""Where fusing a CNN's clients pays on this machine, and whether ``executor.kind: auto`` picks the faster one.

The zoo's GroupNorm CNN (16 and 32 channels, 4 groups) on random side x side single-channel images, 32 clients of
128 samples, one round of FedAvg (1 local epoch, batches of 16, lr 0.05), trained by the sequential executor and
by the fused one at each ``--groups`` K, with ``--threads`` torch threads; each repeat runs them all side by side
(order reversed every other repeat). One JSON line per (side, threads): median seconds of a round's training by
executor, ``fused_speedup`` (sequential seconds over the best fused K's), the first convolution's values a sample
per thread (16 side^2 / threads), and what ``auto`` chose for that run (fedsim/sim/executors/choice.py:
sequential past 4,096 values a thread).

    python bench/auto_executor.py [--sides 8 16 20 24 28] [--threads 1 2] [--groups 8 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from fedsim.config import parse_config
from fedsim.sim.rounds.engine import Engine


def tree(side: int, threads: int, kind: str, group: int) -> dict[str, Any]:
    return {
        "name": "auto-executor",
        "seed": 0,
        "rounds": 1,
        "eval_every": 0,
        "threads": threads,
        "progress": False,
        "data": {
            "dataset": "random",
            "clients": 32,
            "samples_per_client": 128,
            "features": side * side,
            "classes": 10,
            "test_samples": 64,
        },
        "model": {"kind": "cnn", "norm": "group", "groups": 4, "channels": [16, 32]},
        "algorithm": {"kind": "fedavg", "lr": 0.05, "local_epochs": 1, "batch_size": 16},
        "executor": {"kind": kind, "clients": group},
    }


def seconds(side: int, threads: int, kind: str, group: int) -> tuple[float, str]:
    """A round's wall seconds (the engine built before the clock starts) and the executor that ran."""
    with tempfile.TemporaryDirectory() as tmp:
        cfg = parse_config(tree(side, threads, kind, group))
        engine = Engine(cfg, out_dir=Path(tmp) / "out", db_path=Path(tmp) / "runs.db")
        t0 = time.perf_counter()
        engine.run()
        return time.perf_counter() - t0, engine.executor_kind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", type=int, nargs="+", default=[8, 16, 20, 24, 28])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--groups", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for threads in args.threads:
        for side in args.sides:
            settings = [("sequential", "sequential", 1)] + [(f"fused_{k}", "fused", k) for k in args.groups]
            runs: dict[str, list[float]] = {name: [] for name, _, _ in settings}
            for repeat in range(args.repeats):
                for name, kind, k in settings if repeat % 2 == 0 else settings[::-1]:
                    runs[name].append(seconds(side, threads, kind, k)[0])
            chosen = seconds(side, threads, "auto", max(args.groups))[1]
            median = {name: round(statistics.median(values), 3) for name, values in runs.items()}
            best_fused = min(v for name, v in median.items() if name != "sequential")
            print(
                json.dumps(
                    {
                        "bench": "auto_executor",
                        "side": side,
                        "threads": threads,
                        "conv_values_per_thread": 16 * side * side // threads,
                        "seconds": median,
                        "fused_speedup": round(median["sequential"] / best_fused, 2),
                        "auto_chose": chosen,
                        "auto_chose_faster": (chosen == "fused") == (best_fused < median["sequential"]),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
