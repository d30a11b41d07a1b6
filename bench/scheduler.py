"""Scheduler makespan on 4 emulated devices with slow-down factors 1, 1, 2, 4 and clients of uneven size.

One process trains every client for real; each device's seconds on the virtual clock are its measured seconds
times its slow-down factor. Three schedulers: ``lpt`` (the default) plans on the declared slow-downs and
client sizes, ``learned`` on a runtime model fitted on those virtual seconds (Parrot's), ``even`` splits by
count. A round's makespan is the busiest device's virtual seconds. The ideal is the round's total work
(measured seconds at speed 1) divided by the total speed (1 + 1 + 1/2 + 1/4). Figures are medians over the
rounds after the first (``learned`` splits evenly while its model has no data); schedulers are compared through
their makespan over their own round's ideal, which cancels the machine's drift between the runs.

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
KINDS = ("lpt", "learned", "even")


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
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    for _ in range(args.repeats):  # interleaved, so all see the same machine
        with tempfile.TemporaryDirectory() as tmp:
            for kind in KINDS:
                runs[kind] += makespans(kind, args.rounds, args.clients, args.cohort, Path(tmp))
    # each run against its own ideal: the runs are minutes apart on a shared machine
    ratio = {kind: statistics.median(r["makespan"] / r["ideal"] for r in rows) for kind, rows in runs.items()}
    print(
        json.dumps(
            {
                "bench": "scheduler",
                "slowdown": list(SLOWDOWN),
                "rounds_after_first": args.rounds - 1,
                "repeats": args.repeats,
                "cohort": args.cohort,
                **{f"makespan_{k}_s": round(statistics.median(r["makespan"] for r in v), 4) for k, v in runs.items()},
                "ideal_s": round(statistics.median(r["ideal"] for r in runs["lpt"]), 4),
                **{f"{kind}_over_ideal": round(value, 3) for kind, value in ratio.items()},
                "even_over_lpt": round(ratio["even"] / ratio["lpt"], 3),
                "even_over_learned": round(ratio["even"] / ratio["learned"], 3),
                "per_round_lpt_over_ideal": [round(r["makespan"] / r["ideal"], 3) for r in runs["lpt"]],
            }
        )
    )


if __name__ == "__main__":
    main()
