"""A round's cost at any population: the same cohort of 100 lazily generated clients drawn from 1,000, 1,000,000
and 15,000,000 clients (Flower's largest reported simulation).

Each (algorithm, population) runs in its own process so that each peak RSS (``ru_maxrss``) is its own: FedAvg,
and SCAFFOLD with the disk state store (every client that trains leaves a control variate on disk). Clients are
generated from (seed, client) when they train (``lazy``): 64 samples of 784 features, 10 classes, the W1 MLP
784-128-10, one local epoch of batch 16. SCAFFOLD's store keeps a 64 MB LRU cache (``--cache-mb``), full after the
two warm-up rounds at every population (a cache still filling costs page faults that depend on how many distinct
clients have trained so far, not on the population). ``round_s`` is the median of ``--rounds`` rounds after the
warm-up, ``availability`` < 1 draws each round's cohort from the clients reachable that round. The JSON line per
(algorithm, population) carries ``round_ratio`` and ``rss_ratio`` against the smallest population.

    python bench/population.py [--populations 1000 1000000 15000000] [--rounds 5] [--availability 1.0]
        [--cache-mb 64]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from sim_throughput import w1_config

from fedsim.config import parse_config
from fedsim.sim.engine import Engine
from fedsim.sim.summary import peak_rss_mb

WARMUP = 2


def config(
    algorithm: str, population: int, rounds: int, availability: float, cache_mb: float, workdir: Path
) -> dict[str, Any]:
    disk = {"backend": "disk", "dir": str(workdir / "state"), "cache_mb": cache_mb}
    state = disk if algorithm == "scaffold" else {}
    tree = w1_config(population, rounds + WARMUP, lazy=True)
    tree["algorithm"]["name"] = algorithm
    return {
        **tree,
        "name": f"population-{algorithm}-{population}",
        "clients_per_round": 100,
        "emulation": {"availability": availability},
        **({"state": state} if state else {}),
    }


def rounds_of(
    algorithm: str, population: int, rounds: int, availability: float, cache_mb: float, workdir: Path
) -> dict[str, Any]:
    cfg = parse_config(config(algorithm, population, rounds, availability, cache_mb, workdir))
    engine = Engine(cfg, out_dir=workdir / "out", db_path=workdir / "fedsim.db")
    seconds, trained = [], []
    for r in range(rounds + WARMUP):
        t0 = time.perf_counter()
        row = engine.round(r)
        engine.store.flush()
        if r >= WARMUP:  # the allocator, the run store and the state cache warm up
            seconds.append(time.perf_counter() - t0)
            trained.append(row.clients)
    engine.close()
    return {
        "round_s": round(statistics.median(seconds), 4),
        "rounds_s": [round(s, 4) for s in seconds],
        "clients_per_round": trained,
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--populations", type=int, nargs="+", default=[1000, 1_000_000, 15_000_000])
    parser.add_argument("--algorithms", nargs="+", default=["fedavg", "scaffold"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--availability", type=float, default=1.0)
    parser.add_argument("--cache-mb", type=float, default=64.0)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.child:
        algorithm, population = args.child[0], int(args.child[1])
        with tempfile.TemporaryDirectory() as tmp:
            result = rounds_of(algorithm, population, args.rounds, args.availability, args.cache_mb, Path(tmp))
            print(json.dumps(result))
        return
    for algorithm in args.algorithms:
        first: dict[str, Any] | None = None
        for population in args.populations:
            cmd = [sys.executable, __file__, "--child", algorithm, str(population)]
            cmd += ["--rounds", str(args.rounds), "--availability", str(args.availability)]
            cmd += ["--cache-mb", str(args.cache_mb)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            result = json.loads(out.strip().splitlines()[-1])
            first = first or result
            line = {
                "bench": "population",
                "algorithm": algorithm,
                "state": "disk" if algorithm == "scaffold" else "none",
                "population": population,
                "cohort": 100,
                "availability": args.availability,
                "cache_mb": args.cache_mb if algorithm == "scaffold" else None,
                **result,
                "round_ratio": round(result["round_s"] / first["round_s"], 3),
                "rss_ratio": round(result["peak_rss_mb"] / first["peak_rss_mb"], 3),
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
