"""Scheduler makespan on 4 emulated devices with slow-down factors 1, 1, 2, 4 and clients of uneven size.

One process trains every client for real; each device's seconds on the virtual clock are its measured seconds
times its slow-down factor, and the runtime model learns from those. A round's makespan is the busiest
device's virtual seconds. The ideal is the round's total work (measured seconds at speed 1) divided by the
total speed (1 + 1 + 1/2 + 1/4). Figures are medians over the rounds after warm-up (round 0 is an even split
for both schedulers while the runtime model has no data); the two schedulers are compared through their
makespan over their own round's ideal, which cancels the machine's drift between the two runs.

    python bench/scheduler.py [--rounds 8] [--clients 400] [--cohort 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from fedsim.config import parse_config
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine

SLOWDOWN = (1.0, 1.0, 2.0, 4.0)


def makespans(kind: str, rounds: int, clients: int, cohort: int, workdir: Path) -> list[dict[str, float]]:
    cfg = parse_config(
        {
            "name": f"sched-{kind}",
            "rounds": rounds,
            "clients_per_round": cohort,
            "eval_every": 0,
            "threads": 1,
            "progress": False,
            "devices": len(SLOWDOWN),
            "scheduler": {"kind": kind, "warmup": 4},
            "emulation": {"slowdown": list(SLOWDOWN)},
            "data": {"dataset": "synthetic", "clients": clients, "mean_samples": 120, "features": 60},
            "model": {"kind": "mlp", "hidden": [256, 256]},
            "algorithm": {"kind": "fedavg", "lr": 0.01, "batch_size": 8},
        }
    )
    engine = Engine(cfg, out_dir=workdir / kind, db_path=workdir / "fedsim.db")
    engine.run()
    out = []
    with RunStore.open_readonly(workdir / "fedsim.db") as store:
        rows = store.device_rounds(engine.run_id)
    for r in range(1, rounds):
        actual = [d.actual_s for d in rows if d.round == r]
        work = sum(a / f for a, f in zip(actual, SLOWDOWN, strict=True))
        ideal = work / sum(1 / f for f in SLOWDOWN)
        out.append({"makespan": max(actual), "ideal": ideal})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--clients", type=int, default=400)
    parser.add_argument("--cohort", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    even: list[dict[str, float]] = []
    lpt: list[dict[str, float]] = []
    for _ in range(args.repeats):  # interleaved, so both see the same machine
        with tempfile.TemporaryDirectory() as tmp:
            even += makespans("even", args.rounds, args.clients, args.cohort, Path(tmp))
            lpt += makespans("lpt", args.rounds, args.clients, args.cohort, Path(tmp))
    even_s = statistics.median(r["makespan"] for r in even)
    lpt_s = statistics.median(r["makespan"] for r in lpt)
    ideal_s = statistics.median(r["ideal"] for r in lpt)
    # each run against its own ideal: the two runs are minutes apart on a shared machine
    even_ratio = statistics.median(r["makespan"] / r["ideal"] for r in even)
    lpt_ratio = statistics.median(r["makespan"] / r["ideal"] for r in lpt)
    print(
        json.dumps(
            {
                "bench": "scheduler",
                "slowdown": list(SLOWDOWN),
                "rounds_after_warmup": args.rounds - 1,
                "repeats": args.repeats,
                "cohort": args.cohort,
                "makespan_even_s": round(even_s, 4),
                "makespan_scheduler_s": round(lpt_s, 4),
                "ideal_s": round(ideal_s, 4),
                "even_over_ideal": round(even_ratio, 3),
                "scheduler_over_ideal": round(lpt_ratio, 3),
                "even_over_scheduler": round(even_ratio / lpt_ratio, 3),
                "per_round_scheduler_over_ideal": [round(r["makespan"] / r["ideal"], 3) for r in lpt],
            }
        )
    )


if __name__ == "__main__":
    main()
