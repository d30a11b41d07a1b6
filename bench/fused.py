"""The fused executor against the sequential one and against the plainest torch loop, side by side.

W1 (as bench/sim_throughput.py): 1,000 clients x 64 random samples of 784 features, 10 classes; MLP 784-128-10;
1 local epoch, batch 16, SGD lr 0.05; FedAvg; every client every round; 2 rounds; one torch thread.
W2: the quickstart's GroupNorm CNN (16 and 32 channels, 4 groups) on 8x8 single-channel images, 1,000 clients
x 16 random samples, 10 classes; 2 local epochs, batch 16; FedAvg; every client every round; 2 rounds.

Each repeat measures, in this process and one after another: ``limit_s``, the same number of SGD steps of the
same model and batch size in a plain ``torch.optim.SGD`` loop (one model, no federation); ``sequential_s``, the
rounds with ``executor.kind: sequential``; ``fused_s``, the rounds with ``executor.kind: fused`` and
``--group`` clients per group. Each of the three runs with 1 thread and with ``--threads`` (default: every
core) and keeps its faster time, so each is at its best on this machine: a plain loop of small matmuls
gains nothing from a second core, one fused model of K clients does. The thread count each used is printed.
Rounds are timed without start-up and data generation. The JSON line per workload gives the medians and the
medians of the per-repeat ratios: ``fused_vs_limit = limit_s / fused_s`` (above 1: faster than a plain loop),
``sequential_vs_limit`` and ``fused_vs_sequential``. ``gflop`` is the arithmetic of all the workload's SGD steps
(one step's forward and backward counted by torch's FlopCounterMode, times the steps), ``peak_gflops`` this
machine's fp32 rate on 2048x2048 matrix products (the best thread count), and ``fused_share_of_peak`` /
``limit_share_of_peak`` the rate each achieved as a share of it.

    python bench/fused.py [--workloads W1,W2] [--repeats 5] [--group 50] [--clients 1000] [--rounds 2] [--threads N]
        [--accelerator cpu|cuda]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from fedsim.config import RunConfig, parse_config
from fedsim.data.build import build_dataset
from fedsim.models import build_model
from fedsim.sim.rounds.engine import Engine

WORKLOADS: dict[str, dict[str, Any]] = {
    "W1": {
        "data": {"samples_per_client": 64, "features": 784},
        "model": {"kind": "mlp", "hidden": [128]},
        "algorithm": {"local_epochs": 1},
    },
    "W2": {
        "data": {"samples_per_client": 16, "features": 64},
        "model": {"kind": "cnn", "norm": "group", "groups": 4, "channels": [16, 32]},
        "algorithm": {"local_epochs": 2},
    },
}


ACCELERATOR = ["cpu"]  # --accelerator: where the plain loop and both executors run


def config(workload: str, clients: int, rounds: int, executor: str, group: int, threads: int = 1) -> RunConfig:
    spec = WORKLOADS[workload]
    return parse_config(
        {
            "name": f"{workload.lower()}-{executor}",
            "seed": 0,
            "rounds": rounds,
            "eval_every": 0,
            "threads": threads,
            "progress": False,
            "executor": {"kind": executor, "clients": group},
            "accelerator": ACCELERATOR[0],
            "data": {"dataset": "random", "clients": clients, "classes": 10, "test_samples": 256, **spec["data"]},
            "model": spec["model"],
            "algorithm": {"kind": "fedavg", "lr": 0.05, "batch_size": 16, **spec["algorithm"]},
        }
    )


def steps_per_client(cfg: RunConfig) -> int:
    samples = cfg.data.samples_per_client  # type: ignore[union-attr]
    return cfg.algorithm.local_epochs * -(-samples // cfg.algorithm.batch_size)


def plain_loop(cfg: RunConfig, steps: int, seed: int) -> float:
    """Seconds for ``steps`` SGD steps of the workload's model in the plainest torch loop."""
    features, samples = cfg.data.features, cfg.data.samples_per_client  # type: ignore[union-attr]
    device = torch.device(ACCELERATOR[0])
    model = build_model(cfg.model, (features,), 10, seed).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.algorithm.lr)
    x = torch.randn(samples, features, device="cpu").to(device)
    y = torch.randint(0, 10, (samples,), device="cpu").to(device)
    batch = cfg.algorithm.batch_size
    per_epoch = -(-samples // batch)
    t0 = time.perf_counter()
    for step in range(steps):
        lo = (step % per_epoch) * batch
        opt.zero_grad()
        F.cross_entropy(model(x[lo : lo + batch]), y[lo : lo + batch]).backward()
        opt.step()
    _synchronize()
    return time.perf_counter() - t0


def _synchronize() -> None:
    if ACCELERATOR[0] == "cuda":
        torch.cuda.synchronize()


def step_flops(cfg: RunConfig) -> int:
    """The arithmetic of one full-batch SGD step of the workload's model (forward and backward), counted by
    torch's FlopCounterMode on the plain loop's own step."""
    features = cfg.data.features  # type: ignore[union-attr]
    model = build_model(cfg.model, (features,), 10, 0)
    x, y = torch.randn(cfg.algorithm.batch_size, features), torch.randint(0, 10, (cfg.algorithm.batch_size,))
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(x), y).backward()
    return int(counter.get_total_flops())


def matmul_peak(thread_counts: list[int]) -> float:
    """This machine's fp32 matmul rate in GFLOP/s: the best of 2048x2048 products over the thread counts (median
    of 5 each), on the accelerator the workloads run on."""
    device = torch.device(ACCELERATOR[0])
    a, b = torch.randn(2048, 2048, device=device), torch.randn(2048, 2048, device=device)
    rates = []
    for threads in thread_counts:
        torch.set_num_threads(threads)
        times = []
        for _ in range(6):
            t0 = time.perf_counter()
            torch.mm(a, b)
            _synchronize()
            times.append(time.perf_counter() - t0)
        rates.append(2 * 2048**3 / statistics.median(times[1:]) / 1e9)
    return max(rates)


def best(measure: Any, thread_counts: list[int]) -> tuple[float, int]:
    """The fastest of ``measure(threads)`` over the thread counts, and the count that gave it."""
    times = []
    for threads in thread_counts:
        torch.set_num_threads(threads)
        times.append((measure(threads), threads))
    return min(times)


def simulate(cfg: RunConfig, workdir: Path) -> float:
    """Wall seconds of the rounds, without start-up and data generation."""
    dataset = build_dataset(cfg.data, cfg.seed)
    engine = Engine(cfg, out_dir=workdir / "out", db_path=workdir / "fedsim.db", dataset=dataset)
    t0 = time.perf_counter()
    for r in range(cfg.rounds):
        engine.round(r)
    _synchronize()
    seconds = time.perf_counter() - t0
    engine.close()
    return seconds


def rounds_with(workload: str, kind: str, args: argparse.Namespace, workdir: Path, threads: int) -> float:
    cfg = config(workload, args.clients, args.rounds, kind, args.group, threads)
    return simulate(cfg, workdir / f"{kind}{threads}")


def measure(workload: str, args: argparse.Namespace, counts: list[int]) -> dict[str, Any]:
    """The JSON line of one workload: medians over the repeats, each time at its best thread count."""
    seq_cfg = config(workload, args.clients, args.rounds, "sequential", args.group)
    steps = args.rounds * args.clients * steps_per_client(seq_cfg)
    runs: dict[str, list[float]] = {"limit_s": [], "sequential_s": [], "fused_s": []}
    used: dict[str, list[int]] = {k: [] for k in runs}
    for rep in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            for kind in ("sequential", "fused"):
                seconds, threads = best(functools.partial(rounds_with, workload, kind, args, Path(tmp)), counts)
                runs[f"{kind}_s"].append(seconds)
                used[f"{kind}_s"].append(threads)
        seconds, threads = best(lambda _threads: plain_loop(seq_cfg, steps, seed=rep), counts)  # noqa: B023
        runs["limit_s"].append(seconds)
        used["limit_s"].append(threads)

    def ratio(num: str, den: str) -> float:
        return round(statistics.median(a / b for a, b in zip(runs[num], runs[den], strict=True)), 3)

    work = steps * step_flops(seq_cfg) / 1e9  # GFLOP every executor must do (padding and masks not counted)
    peak = matmul_peak(counts)

    return {
        "bench": "fused",
        "workload": workload,
        "clients": args.clients,
        "rounds": args.rounds,
        "steps": steps,
        "group": args.group,
        "repeats": args.repeats,
        **{k: round(statistics.median(v), 4) for k, v in runs.items()},
        "fused_vs_limit": ratio("limit_s", "fused_s"),
        "sequential_vs_limit": ratio("limit_s", "sequential_s"),
        "fused_vs_sequential": ratio("sequential_s", "fused_s"),
        "gflop": round(work, 2),
        "peak_gflops": round(peak, 1),
        "fused_gflops": round(work / statistics.median(runs["fused_s"]), 1),
        "fused_share_of_peak": round(work / statistics.median(runs["fused_s"]) / peak, 3),
        "limit_share_of_peak": round(work / statistics.median(runs["limit_s"]) / peak, 3),
        "threads": {k.removesuffix("_s"): statistics.mode(v) for k, v in used.items()},
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if ACCELERATOR[0] == "cuda" else "cpu",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="W1,W2")
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--group", type=int, default=50, help="clients per fused group")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the other thread count tried")
    parser.add_argument("--accelerator", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    ACCELERATOR[0] = args.accelerator
    counts = sorted({1, args.threads})
    for workload in args.workloads.split(","):
        print(json.dumps(measure(workload, args, counts)), flush=True)


if __name__ == "__main__":
    main()
