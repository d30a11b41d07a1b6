"""Asynchronous FL on the virtual clock: FedBuff and FedAsync against the synchronous round with a deadline, on
one synthetic trace, and what an applied update costs at a population of a thousand and of a million.

``--part accuracy`` (default): MNIST (../shared/data/mnist or ``--dir``), 1,000 clients with Dirichlet(0.3) label
skew, the small GroupNorm CNN, FedAvg's local step (1 epoch of batch 16 at lr 0.05), over a synthetic trace of
1,000 devices (fedsim.traces.synthetic's defaults: log-normal seconds per sample around 5 ms, uplinks around
5 Mbit/s, downlinks 20 Mbit/s, nightly windows across time zones; ``--sigma`` widens the spread of all
three, e.g. 1.5 for devices 100x apart as in FedScale's AI Benchmark trace), the run's seed 0. Settings:

- ``sync``: 13 clients start together (10 over-selected by 30%), a round takes the first 10 updates or what has
  arrived by ``--deadline`` seconds (1.5: about the 95th percentile of a task here; the median is 0.5 s), the
  stragglers are discarded;
- ``fedbuff``: 20 clients in flight, a server step every 10 arrivals, staleness weight 1 / sqrt(1 + s);
- ``fedasync``: 20 in flight, each local model mixed in at alpha 0.6 x the hinge weight (a 0.5, b 4).

The model is evaluated every ``--eval-every`` server steps (5, 5 and 50: a FedAsync step applies one update).
The target is the synchronous run's final accuracy; each line has the virtual seconds to reach it (the first
evaluation at or above it), the clock at the end, the accuracy at each evaluation against the clock, the final
accuracy, wall seconds and server steps; FedBuff's and FedAsync's lines have ``vs_sync``, their time to the
target over the synchronous run's.

``--part population``: the W1 MLP on lazily generated clients (64 samples each), FedBuff with 100 in flight and
a buffer of 10, populations ``--populations`` (each in its own process, for its own peak RSS), the seconds per
applied update (median over ``--steps`` server steps after 2 warm-up steps) and peak RSS, and their ratios to
the first population, the median over ``--repeats`` passes (forwards, then backwards: a machine's drift falls
on both sides of each ratio).

    python bench/async.py [--part accuracy] [--steps 60 120 1200] [--deadline 1.5] [--eval-every 5 5 50] [--sigma S]
    python bench/async.py --part population [--populations 1000 1000000] [--steps 20] [--repeats 3]
    python bench/async.py --part executors [--populations 1000] [--steps 20] [--repeats 3]

``--part private``: sync against FedBuff as above, both with central DP at the same ``--epsilon`` (delta
``--delta``): each update clipped to ``--clip``, every client weighing 1, Gaussian noise on each release's sum
(a round's ``--cohort`` updates, default 100 of 130 started; a buffer of as many, twice as many in flight),
calibrated before the run for its own number of releases (60 rounds, 300 steps) and accounted with no
amplification by sampling (the trace decides who reports: docs/how-to/privacy.md). The target is the private
sync run's final accuracy.

    python bench/async.py --part private [--epsilon 50] [--clip 1.0] [--cohort 100] [--steps 60 300]

``--part executors``: the same FedBuff run at the first population trained one client at a time and by the
fused executor (the clients started since the model last moved, about a buffer's worth, in one call), the seconds
per applied update of each and their ratio, the median over ``--repeats`` side-by-side pairs.
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
from mnist_tree import mnist_tree
from sim_throughput import w1_config

from fedsim import Simulation
from fedsim.asynchronous.engine import AsyncEngine
from fedsim.config import parse_config
from fedsim.sim.rounds.summary import peak_rss_mb

ROOT = Path(__file__).resolve().parent.parent
PRIVATE_FIELDS = ("epsilon", "delta", "noise_multiplier", "clip", "sampling", "neighbours", "sensitivity", "rounds")
SETTINGS: dict[str, dict[str, Any]] = {
    "sync": {"clients_per_round": 10, "over_select": 3},  # a synchronous run on the same clock
    "fedbuff": {"kind": "fedbuff", "concurrency": 20, "buffer": 10, "staleness": "polynomial", "staleness_a": 0.5},
    "fedasync": {"kind": "fedasync", "concurrency": 20, "alpha": 0.6, "staleness": "hinge"},
}


def accuracy_run(
    name: str,
    steps: int,
    every: int,
    args: argparse.Namespace,
    target: float | None,
    privacy: dict[str, Any] | None = None,
) -> dict[str, Any]:
    tree = mnist_tree(f"async-{name}", args.dir, 1000, 0.3, SETTINGS["sync"]["clients_per_round"], steps, 1)
    if privacy is not None:
        tree["privacy"] = privacy
    spread = {"compute_sigma": args.sigma, "uplink_sigma": args.sigma, "downlink_sigma": args.sigma}
    trace = {"synthetic": {"clients": 1000, **(spread if args.sigma is not None else {})}}
    clock: dict[str, Any] = {"kind": "trace", "trace": trace, "target_accuracy": target}
    if name == "sync":
        cohort = SETTINGS[name]["clients_per_round"]
        clock |= {"over_select": SETTINGS[name]["over_select"], "deadline_s": args.deadline}
        tree |= {"eval_every": every, "clients_per_round": cohort, "clock": clock}
    else:
        tree |= {"eval_every": every, "clients_per_round": None, "asynchronous": SETTINGS[name], "clock": clock}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        sim = Simulation(tree, out=Path(tmp) / "out", db=Path(tmp) / "runs.db")
        summary = sim.run()
        wall = time.perf_counter() - t0
        fields = json.loads((Path(tmp) / "out" / "summary.json").read_text())
    clock = fields["clock"]
    return {
        "bench": "async",
        "setting": name,
        **{k: v for k, v in SETTINGS[name].items() if k != "kind"},
        **({"deadline_s": args.deadline} if name == "sync" else {}),
        "server_steps": fields.get("asynchronous", {}).get("server_steps", fields["rounds"]),
        "final_accuracy": round(summary.final_accuracy, 4),
        "virtual_s": round(clock["clock_s"], 1),
        "accuracy_by_clock": [[round(t, 1), round(a, 4)] for t, a in clock["accuracy_by_clock"]],
        "wall_s": round(wall, 1),
        "trace": clock["trace"]["fingerprint"][:16],
        "trace_sigmas": [clock["trace"][f"{k}_sigma"] for k in ("compute", "uplink", "downlink")],
        **({"privacy": {k: fields["privacy"][k] for k in PRIVATE_FIELDS}} if privacy is not None else {}),
    }


def time_to(curve: list[list[float]], target: float) -> float | None:
    return next((t for t, accuracy in curve if accuracy >= target), None)


def accuracy_part(args: argparse.Namespace) -> None:
    names = ("sync", "fedbuff", "fedasync")
    steps = dict(zip(names, args.steps, strict=True))
    every = dict(zip(names, args.eval_every, strict=True))
    sync = accuracy_run("sync", steps["sync"], every["sync"], args, None)
    target = sync["final_accuracy"]
    sync_time = time_to(sync["accuracy_by_clock"], target)
    print(json.dumps({**sync, "target": target, "time_to_target_s": sync_time}), flush=True)
    for name in ("fedbuff", "fedasync"):
        line = accuracy_run(name, steps[name], every[name], args, target)
        reached = time_to(line["accuracy_by_clock"], target)
        ratio = round(reached / sync_time, 3) if reached is not None and sync_time else None
        print(json.dumps({**line, "target": target, "time_to_target_s": reached, "vs_sync": ratio}), flush=True)


def private_part(args: argparse.Namespace) -> None:
    """Sync and FedBuff with central DP at the same epsilon, each calibrated for its own releases, with
    ``--cohort`` updates a release (sync: that many a round of 1.3x as many started; FedBuff: the buffer, with
    twice as many in flight)."""
    privacy = {"kind": "central", "clip": args.clip, "target_epsilon": args.epsilon, "delta": args.delta}
    k = args.cohort
    SETTINGS["sync"] |= {"clients_per_round": k, "over_select": round(0.3 * k)}
    SETTINGS["fedbuff"] |= {"buffer": k, "concurrency": 2 * k}
    names = ("sync", "fedbuff")
    steps = dict(zip(names, args.steps, strict=True))
    sync = accuracy_run("sync", steps["sync"], args.eval_every[0], args, None, privacy)
    target = sync["final_accuracy"]
    sync_time = time_to(sync["accuracy_by_clock"], target)
    print(json.dumps({**sync, "target": target, "time_to_target_s": sync_time}), flush=True)
    line = accuracy_run("fedbuff", steps["fedbuff"], args.eval_every[1], args, target, privacy)
    reached = time_to(line["accuracy_by_clock"], target)
    ratio = round(reached / sync_time, 3) if reached is not None and sync_time else None
    print(json.dumps({**line, "target": target, "time_to_target_s": reached, "vs_sync": ratio}), flush=True)


def population_child(population: int, steps: int, executor: str = "auto") -> dict[str, Any]:
    tree = w1_config(population, steps + 2, lazy=True)
    tree |= {
        "name": f"async-population-{population}",
        "executor": {"kind": executor},
        "asynchronous": {
            "kind": "fedbuff",
            "concurrency": 100,
            "buffer": 10,
        },
        "clock": {"kind": "trace", "trace": {"synthetic": {"clients": 1000}}},
    }
    with tempfile.TemporaryDirectory() as tmp:
        engine = AsyncEngine(parse_config(tree), out_dir=Path(tmp) / "out", db_path=Path(tmp) / "runs.db")
        seconds, calls = [], []
        train = engine.executor.train

        def counted(context: Any, assignments: list[tuple[int, int]], *rest: Any) -> Any:
            calls.append(len(assignments))
            return train(context, assignments, *rest)

        engine.executor.train = counted  # type: ignore[method-assign]
        for r in range(steps + 2):
            t0 = time.perf_counter()
            engine.round(r)
            if r >= 2:
                seconds.append((time.perf_counter() - t0) / 10)  # ten applied updates a step
        engine.close()
    return {
        "per_update_s": statistics.median(seconds),
        "peak_rss_mb": peak_rss_mb(),
        "executor": engine.executor_kind,
        "clients_per_call": round(sum(calls) / len(calls), 2),
    }


def executors_part(args: argparse.Namespace) -> None:
    """Sequential against fused at the first population, side by side in one process, alternating which goes
    first; the median of ``--repeats`` ratios."""
    population, steps = args.populations[0], args.steps[0]
    passes = []
    for rep in range(args.repeats):
        order = ("sequential", "fused") if rep % 2 == 0 else ("fused", "sequential")
        passes.append({kind: population_child(population, steps, kind) for kind in order})
    seq, fused = ([p[kind] for p in passes] for kind in ("sequential", "fused"))
    ratios = [s["per_update_s"] / f["per_update_s"] for s, f in zip(seq, fused, strict=True)]
    line = {
        "bench": "async_executors",
        "population": population,
        "concurrency": 100,
        "buffer": 10,
        "steps": steps,
        "repeats": args.repeats,
        "sequential_per_update_s": round(statistics.median(r["per_update_s"] for r in seq), 5),
        "fused_per_update_s": round(statistics.median(r["per_update_s"] for r in fused), 5),
        "fused_clients_per_call": fused[0]["clients_per_call"],
        "fused_speedup": round(statistics.median(ratios), 3),
        "speedups": [round(r, 3) for r in ratios],
    }
    print(json.dumps(line), flush=True)


def population_part(args: argparse.Namespace) -> None:
    """``--repeats`` passes over the populations, forwards then backwards, each ratio taken within a pass."""
    passes = []
    for rep in range(args.repeats):
        order = args.populations if rep % 2 == 0 else list(reversed(args.populations))
        results = {}
        for population in order:
            cmd = [sys.executable, __file__, "--child", str(population), "--steps", str(args.steps[0])]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            results[population] = json.loads(out.strip().splitlines()[-1])
        passes.append(results)
    base = args.populations[0]
    for population in args.populations:
        update_ratios = [p[population]["per_update_s"] / p[base]["per_update_s"] for p in passes]
        rss_ratios = [p[population]["peak_rss_mb"] / p[base]["peak_rss_mb"] for p in passes]
        line = {
            "bench": "async_population",
            "population": population,
            "concurrency": 100,
            "buffer": 10,
            "repeats": args.repeats,
            "per_update_s": round(statistics.median(p[population]["per_update_s"] for p in passes), 5),
            "peak_rss_mb": round(statistics.median(p[population]["peak_rss_mb"] for p in passes), 1),
            "per_update_ratio": round(statistics.median(update_ratios), 3),
            "per_update_ratios": [round(r, 3) for r in update_ratios],
            "rss_ratio": round(statistics.median(rss_ratios), 3),
        }
        print(json.dumps(line), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["accuracy", "private", "population", "executors"], default="accuracy")
    parser.add_argument("--dir", type=Path, default=ROOT.parent / "shared" / "data" / "mnist")
    parser.add_argument("--steps", type=int, nargs="+", default=None, help="server steps (sync fedbuff fedasync)")
    parser.add_argument("--deadline", type=float, default=1.5, help="sync: a round's deadline in virtual seconds")
    parser.add_argument("--sigma", type=float, default=None, help="the trace's log-normal spread of speeds and links")
    parser.add_argument("--eval-every", type=int, nargs=3, default=[5, 5, 50], help="sync fedbuff fedasync")
    parser.add_argument("--populations", type=int, nargs="+", default=[1000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=3, help="population: passes over the populations")
    parser.add_argument("--epsilon", type=float, default=50.0, help="private: the epsilon both runs spend")
    parser.add_argument("--delta", type=float, default=1e-5, help="private: the delta of (epsilon, delta)")
    parser.add_argument("--clip", type=float, default=1.0, help="private: the L2 bound of a client's update")
    parser.add_argument("--cohort", type=int, default=100, help="private: updates a release (round, buffer)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.child is not None:
        print(json.dumps(population_child(args.child, args.steps[0] if args.steps else 20)))
        return
    if args.part in ("population", "executors"):
        args.steps = args.steps or [20]
        (population_part if args.part == "population" else executors_part)(args)
    elif args.part == "private":
        args.steps = args.steps or [60, 300]
        private_part(args)
    else:
        args.steps = args.steps or [60, 120, 1200]
        accuracy_part(args)


if __name__ == "__main__":
    main()
