"""A round's cost at any population: the same cohort of 100 lazily generated clients drawn from 1,000, 1,000,000
and 15,000,000 clients (Flower's largest reported simulation).

Each (algorithm, population) runs in its own process so that each peak RSS (``ru_maxrss``) is its own: FedAvg,
and SCAFFOLD with the disk state store (every client that trains leaves a control variate on disk). Clients are
generated from (seed, client) when they train (``lazy``): 64 samples of 784 features, 10 classes, the W1 MLP
784-128-10, one local epoch of batch 16. SCAFFOLD's store keeps a 64 MB LRU cache (``--cache-mb``), full after the
two warm-up rounds at every population (a cache still filling costs page faults that depend on how many distinct
clients have trained so far, not on the population). ``round_s`` is the median of ``--rounds`` rounds after the
warm-up, ``availability`` < 1 draws each round's cohort from the clients reachable that round. The populations
run ``--repeats`` times, one process after another, forwards then backwards, and each ratio is taken within a
pass, so a machine whose speed drifts from one minute to the next (40% here, between processes) weighs on both
sides of it. The JSON line per (algorithm, population) carries the median over the passes of ``round_s`` and
peak RSS, and of ``round_ratio`` and ``rss_ratio`` against the first population, with each pass's figures.

    python bench/population.py [--populations 1000 1000000 15000000] [--rounds 10] [--repeats 9]
        [--availability 1.0] [--cache-mb 64]
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
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.summary import peak_rss_mb

WARMUP = 2


def config(
    algorithm: str, population: int, rounds: int, availability: float, cache_mb: float, workdir: Path
) -> dict[str, Any]:
    disk = {"backend": "disk", "dir": str(workdir / "state"), "cache_mb": cache_mb}
    state = disk if algorithm == "scaffold" else {}
    tree = w1_config(population, rounds + WARMUP, lazy=True)
    tree["algorithm"]["kind"] = algorithm
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


def child(algorithm: str, population: int, args: argparse.Namespace) -> dict[str, Any]:
    """One population's rounds in a fresh process, so that its peak RSS is its own."""
    cmd = [sys.executable, __file__, "--child", algorithm, str(population)]
    cmd += ["--rounds", str(args.rounds), "--availability", str(args.availability)]
    cmd += ["--cache-mb", str(args.cache_mb)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def passes(algorithm: str, args: argparse.Namespace) -> list[dict[int, dict[str, Any]]]:
    """``--repeats`` passes over the populations, each population's process right after another's, in turn
    forwards and backwards, so that a machine's drift over minutes falls on every population alike."""
    done = []
    for rep in range(args.repeats):
        order = args.populations if rep % 2 == 0 else list(reversed(args.populations))
        done.append({population: child(algorithm, population, args) for population in order})
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--populations", type=int, nargs="+", default=[1000, 1_000_000, 15_000_000])
    parser.add_argument("--algorithms", nargs="+", default=["fedavg", "scaffold"])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument(
        "--repeats", type=int, default=9, help="passes over the populations (SCAFFOLD's swing 0.8-1.25x)"
    )
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
    base = args.populations[0]
    for algorithm in args.algorithms:
        runs = passes(algorithm, args)
        for population in args.populations:
            mine = [run[population] for run in runs]
            round_ratios = [run[population]["round_s"] / run[base]["round_s"] for run in runs]
            rss_ratios = [run[population]["peak_rss_mb"] / run[base]["peak_rss_mb"] for run in runs]
            line = {
                "bench": "population",
                "algorithm": algorithm,
                "state": "disk" if algorithm == "scaffold" else "none",
                "population": population,
                "cohort": 100,
                "availability": args.availability,
                "cache_mb": args.cache_mb if algorithm == "scaffold" else None,
                "repeats": args.repeats,
                "round_s": round(statistics.median(r["round_s"] for r in mine), 4),
                "round_s_passes": [r["round_s"] for r in mine],
                "clients_per_round": mine[0]["clients_per_round"],
                "peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in mine), 1),
                "round_ratio": round(statistics.median(round_ratios), 3),
                "round_ratios": [round(x, 3) for x in round_ratios],
                "rss_ratio": round(statistics.median(rss_ratios), 3),
            }
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
