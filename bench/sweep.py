"""Gavel's policies against the heterogeneity-agnostic LPT placement, on a 12-run grid and an emulated pool.

The grid and pool are examples/sweep.yaml's: 3 models (the GroupNorm CNN, a 64-unit MLP, logistic regression) x
2 algorithms x 2 seeds of the quickstart, 20 rounds each, on 2 devices each of 3 types whose speed relative to
this host depends on the model (the CNN 1 / 0.35 / 0.12, the MLP 1 / 0.7 / 0.45, logistic regression
1 / 0.9 / 0.8: the pattern of Gavel's V100 / P100 / K80 table, where a large convolutional model gains most from a
fast GPU). Each run's seconds per round are measured here (a throwaway copy, ``--measure-rounds`` rounds after one
warm-up; the median of ``--repeats`` such plans is reported); the placements are then computed in virtual time
under each policy: ``lpt`` (longest run first by its seconds here, to whichever device frees first, to completion)
and Gavel's ``min_makespan`` and ``max_min_fairness`` allocations placed round by round with scheduling rounds of
``--round-fraction`` of the makespan programme's optimum. One JSON line per policy: makespan and mean completion
time (virtual seconds) and their ratios to LPT's (above 1: better than LPT).

    python bench/sweep.py [--sweep examples/sweep.yaml] [--repeats 3] [--round-fraction 0.02]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
import torch

from fedsim.sweep.gavel import min_makespan
from fedsim.sweep.grid import load_sweep, measure
from fedsim.sweep.run import plan, throughputs

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("lpt", "min_makespan", "max_min_fairness")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", type=Path, default=ROOT / "examples" / "sweep.yaml")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--measure-rounds", type=int, default=3)
    parser.add_argument("--round-fraction", type=float, default=0.02)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg, runs = load_sweep(args.sweep)
    results: dict[str, list[tuple[float, float]]] = {p: [] for p in POLICIES}
    for _ in range(args.repeats):
        host_s = [measure(run.cfg, args.measure_rounds) for run in runs]
        t = throughputs(cfg, runs, host_s)
        steps = np.array([run.cfg.rounds for run in runs], dtype=float)
        optimum = min_makespan(t, np.array(list(cfg.types.values())), steps).objective
        for policy in POLICIES:
            policy_cfg = cfg.model_copy(update={"policy": policy, "round_s": optimum * args.round_fraction})
            schedule = plan(policy_cfg, runs, host_s).schedule
            results[policy].append((schedule.makespan_s, schedule.mean_completion_s))
    lpt_makespan = statistics.median(r[0] for r in results["lpt"])
    lpt_completion = statistics.median(r[1] for r in results["lpt"])
    for policy in POLICIES:
        makespan = statistics.median(r[0] for r in results[policy])
        completion = statistics.median(r[1] for r in results[policy])
        line = {
            "bench": "sweep",
            "policy": policy,
            "runs": len(runs),
            "devices": cfg.types,
            "makespan_s": round(makespan, 3),
            "mean_completion_s": round(completion, 3),
            "makespan_vs_lpt": round(lpt_makespan / makespan, 3),
            "completion_vs_lpt": round(lpt_completion / completion, 3),
            "repeats": args.repeats,
            "round_fraction": args.round_fraction,
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
