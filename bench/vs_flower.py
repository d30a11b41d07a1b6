"""Workload W1 in fedsim and in Flower's Simulation Runtime on the same machine, same client code.

W1 (see bench/sim_throughput.py): 1000 clients x 64 random samples, MLP 784-128-10, 1 local epoch of batch 16,
FedAvg, every client every round, 2 rounds. fedsim runs it as ``fedsim run`` would (one device, one process),
with ``--executor`` (default fused, ``--group`` clients at a time: by default the config's, as ``fedsim run`` takes it)
and ``--threads`` torch threads (default every core);
Flower runs fedsim's own client code wrapped as a ClientApp (fedsim/flower/app.py) under ``run_simulation``
with the Ray backend, one CPU per client, as many Ray workers as there are cores, and Flower's FedAvg on the
server. Both wall times are end to end: start-up, data, rounds and saving the model. Each repeat runs both side
by side; the JSON line reports medians and ``speedup = flower_s / fedsim_s``. Both run in this process, after
both libraries are imported, and fedsim's run starts only once Flower's Ray processes have exited;
``fedsim_import_s`` is what importing ``fedsim run``'s modules (torch included) costs a fresh interpreter, the median of
5 subprocesses, and ``speedup_with_import`` the median of ``flower_s / (fedsim_s + fedsim_import_s)``, a cold
start added. Those 5 read compiled bytecode, as every run but a user's first does: one untimed interpreter
before them may write it (``PYTHONDONTWRITEBYTECODE`` is lifted for it alone, since a machine that sets it
would otherwise compile fedsim from source on every start), and ``fedsim_import_first_s`` is that first one.

    python bench/vs_flower.py [--clients 1000] [--rounds 2] [--repeats 3] [--executor fused] [--group K] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from sim_throughput import w1_config

from fedsim.api.launch import execute, final_weights
from fedsim.config import ExecutorConfig, parse_config


def run_fedsim(tree: dict[str, object], workdir: Path) -> float:
    t0 = time.perf_counter()
    execute(parse_config(tree), workdir / "fedsim", workdir / "fedsim.db")
    return time.perf_counter() - t0


def run_flower(tree: dict[str, object], workdir: Path) -> float:
    from fedsim.flower import run_flower_simulation

    t0 = time.perf_counter()
    run_flower_simulation(parse_config(tree), workdir / "flower")
    seconds = time.perf_counter() - t0
    settle()
    return seconds


def settle(timeout: float = 60.0) -> None:
    """Wait, untimed, until Ray's worker processes of the Flower run are gone, so that they do not share the
    cores with the next fedsim measurement (they outlive ``run_simulation`` by seconds)."""
    import psutil  # comes with ray

    deadline = time.monotonic() + timeout
    me = psutil.Process()
    while time.monotonic() < deadline:
        others = [p for p in psutil.process_iter(["name", "cmdline"]) if p.pid != me.pid and _is_ray(p)]
        if not others:
            return
        time.sleep(0.5)


def _is_ray(process: object) -> bool:
    info = getattr(process, "info", {}) or {}
    text = " ".join([info.get("name") or "", *(info.get("cmdline") or [])])
    return "ray::" in text or "raylet" in text or "gcs_server" in text or "default_worker.py" in text


def import_seconds(times: int = 5) -> tuple[float, float]:
    """Wall seconds a fresh interpreter takes to import what ``fedsim run`` imports before its first round (the
    command line, torch through ``fedsim.load_torch`` as fedsim/cli does, then the launcher and the engine): the
    median of ``times`` interpreters (one alone swung from 1.0 to 1.26 s between runs here), after a first one that
    may write the bytecode cache: (first, median)."""
    code = (
        "import time; t = time.perf_counter(); import fedsim, fedsim.cli; fedsim.load_torch();"
        " import fedsim.api.launch; print(time.perf_counter() - t)"
    )
    first = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
        for env in [first, *[None] * times]
    ]
    seconds = [float(done.stdout.strip()) for done in runs]
    return seconds[0], statistics.median(seconds[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--executor", choices=("sequential", "fused"), default="fused")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="fedsim's torch threads")
    parser.add_argument("--group", type=int, default=ExecutorConfig().clients, help="fused: clients at a time")
    args = parser.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)
    torch.set_num_threads(1)
    tree = w1_config(args.clients, args.rounds)
    fedsim_tree = {**tree, "threads": args.threads, "executor": {"kind": args.executor, "clients": args.group}}
    fedsim_s, flower_s, gaps = [], [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            fedsim_s.append(run_fedsim(fedsim_tree, work))
            flower_s.append(run_flower(tree, work))
            gaps.append(float((final_weights(work / "fedsim") - final_weights(work / "flower")).abs().max()))
    first_import, imported = import_seconds()
    print(
        json.dumps(
            {
                "bench": "vs_flower",
                "workload": "W1",
                "clients": args.clients,
                "rounds": args.rounds,
                "repeats": args.repeats,
                "cores": os.cpu_count(),
                "flower_cpus_per_client": 1,
                "executor": args.executor,
                "group": args.group,
                "fedsim_threads": args.threads,
                "fedsim_s": round(statistics.median(fedsim_s), 3),
                "fedsim_runs_s": [round(x, 3) for x in fedsim_s],
                "flower_s": round(statistics.median(flower_s), 3),
                "speedup": round(statistics.median(b / a for a, b in zip(fedsim_s, flower_s, strict=True)), 2),
                "max_weight_gap": max(gaps),
                "fedsim_import_first_s": round(first_import, 3),
                "fedsim_import_s": round(imported, 3),
                "speedup_with_import": round(
                    statistics.median(b / (a + imported) for a, b in zip(fedsim_s, flower_s, strict=True)), 2
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
