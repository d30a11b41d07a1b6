"""Client selectors against uniform selection: rounds and virtual seconds to a target accuracy under label skew.

Workload: the quickstart (examples/quickstart.yaml: digits over 100 clients, Dirichlet 0.5 label skew, the
GroupNorm CNN, FedAvg, 2 local epochs of batch 16) with 10 clients a round, as power-of-choice's paper samples
a small share (Cho et al. 2022 use 100 clients and 3 to 10 a round), 60 rounds, evaluated every round.
Selectors: ``uniform``, ``power_of_choice`` with d = 20 and d = 50 candidates (drawn in proportion to the
clients' samples, the paper's draw) ranked by each ``--variants`` (default rpow-d, the stale reported losses;
pow-d and cpow-d have the candidates score the current model; the quickstart's clients hold at most 45
samples, under cpow-d's default b = 64, so there cpow-d scores all of them as pow-d does), ``oort`` with
FedScale's defaults but its pacer's window ``W`` (``pacer_step``): 5 rounds here, not 20, so that the pacer,
which first compares two windows at round 2W and then every W, acts 11 times in 60 rounds (at FedScale's 20 it
would act twice: the paper's runs are 1000 rounds, 50 windows). Seeds 0, 1, 2 (each seed is the run's:
partition, initial model, cohorts).

The virtual clock: a synchronous round lasts as long as its slowest client, and a client's task lasts what the
run's population trace gives (``clock.trace``, here synthetic: 100 devices, seed 0, log-normal seconds
per sample around 5 ms, uplinks around 5 Mbit/s, downlinks around 20): the samples of its local steps at its
speed, plus the model down and the update up at its link rates (fedsim.sim.selection.durations, the same
durations Oort's system utility reads). Power-of-choice does not look at speed; Oort does.

For targets 0.80 and 0.90 (fixed before any run), each line gives, per selector, the rounds and the virtual
seconds until the first evaluated round at or above the target (None when never reached in 60 rounds), the
final accuracy, each per seed, and ``speedup``: uniform's seconds to the target over the selector's, the median
of the per-seed ratios (above 1: faster than uniform); ``speedup_rounds`` the same in rounds.

    python bench/selection.py [--rounds 60] [--seeds 0 1 2] [--cohort 10] [--candidates 20 50]
                              [--variants rpow-d pow-d cpow-d] [--pacer-step 5] [--no-oort]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from fedsim.config import load_config
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine

ROOT = Path(__file__).resolve().parent.parent
TARGETS = (0.80, 0.90)


def run(selection: dict[str, Any], seed: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """One run's accuracy and virtual seconds, round by round."""
    overrides = [f"seed={seed}", f"rounds={args.rounds}", f"clients_per_round={args.cohort}", "eval_every=1"]
    overrides += ["progress=false", *(f"selection.{k}={v}" for k, v in selection.items())]
    overrides += ["clock.trace.synthetic.clients=100", "clock.trace.synthetic.seed=0"]
    cfg = load_config(ROOT / "examples" / "quickstart.yaml", overrides)
    out = tmp / f"{selection['kind']}-{selection.get('candidates')}-{selection.get('variant')}-{seed}"
    engine = Engine(cfg, out_dir=out, db_path=out / "runs.db")
    engine.run()
    duration = engine.seconds  # each client's task on the run's trace
    with RunStore.open_readonly(out / "runs.db") as store:
        (record,) = store.list_runs()
        rounds = sorted(store.rounds(record.run_id), key=lambda row: row.round)
        clients = store.client_runs(record.run_id)
    seconds = dict.fromkeys(range(cfg.rounds), 0.0)
    for row in clients:  # the round lasts as long as its slowest client
        seconds[row.round] = max(seconds[row.round], duration(row.client))
    clock, curve = 0.0, []
    for row in rounds:
        clock += seconds[row.round]
        curve.append((row.round + 1, clock, row.test_accuracy))
    return {"curve": curve, "final": curve[-1][2]}


def to_target(curve: list[tuple[int, float, float | None]], target: float) -> tuple[int | None, float | None]:
    for rounds, clock, accuracy in curve:
        if accuracy is not None and accuracy >= target:
            return rounds, clock
    return None, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--cohort", type=int, default=10)
    parser.add_argument("--candidates", type=int, nargs="+", default=[20, 50])
    parser.add_argument("--variants", nargs="+", default=["rpow-d"], choices=["pow-d", "cpow-d", "rpow-d"])
    parser.add_argument("--pacer-step", type=int, default=5, help="Oort's W: rounds between its pacer's checks")
    parser.add_argument("--no-oort", dest="oort", action="store_false", help="leave Oort out")
    args = parser.parse_args()
    chosen = [{"candidates": d, "variant": v} for d in args.candidates for v in args.variants]
    selectors = [{"kind": "uniform"}, *({"kind": "power_of_choice"} | c for c in chosen)]
    selectors += [{"kind": "oort", "pacer_step": args.pacer_step}] if args.oort else []
    with tempfile.TemporaryDirectory(prefix="selection-") as scratch:
        runs = {json.dumps(s): [run(s, seed, args, Path(scratch)) for seed in args.seeds] for s in selectors}
    uniform = runs[json.dumps(selectors[0])]
    for selection in selectors:
        mine = runs[json.dumps(selection)]
        line: dict[str, Any] = {"bench": "selection", **selection, "cohort": args.cohort, "rounds": args.rounds}
        line["seeds"] = args.seeds
        line["final_accuracy"] = round(statistics.mean(r["final"] for r in mine), 4)
        line["final_accuracy_each"] = [round(r["final"], 4) for r in mine]
        for target in TARGETS:
            reached = [to_target(r["curve"], target) for r in mine]
            base = [to_target(r["curve"], target) for r in uniform]
            ratios = [b[1] / m[1] for b, m in zip(base, reached, strict=True) if b[1] and m[1]]
            in_rounds = [b[0] / m[0] for b, m in zip(base, reached, strict=True) if b[0] and m[0]]
            line[f"to_{target:.2f}"] = {
                "rounds_each": [r for r, _ in reached],
                "virtual_s_each": [None if s is None else round(s, 1) for _, s in reached],
                "speedup": round(statistics.median(ratios), 3) if ratios else None,
                "speedup_rounds": round(statistics.median(in_rounds), 3) if in_rounds else None,
            }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
