"""What privacy costs on MNIST: non-private FedAvg, clipping only, and central DP at epsilon 8, 4, 2 and 1.

1,000 clients with Dirichlet(0.3) label skew of MNIST's 60,000 training images, a small GroupNorm CNN, 50
clients a round (fixed-size cohorts), 1 local epoch of batch 16 at lr 0.05, ``--rounds`` rounds; accuracy on
the 10,000 test images after the last. The private runs clip each client's update to ``--clip`` and add the
noise pfl-research's benchmarks add: a noise cohort of ``--noise-cohort`` clients out of a population of
``--population`` (a deployment that samples 1,000 of a million users a round), delta 1e-6, the noise
multiplier calibrated before round 0 for each target epsilon with dp-accounting's RDP accountant (sampling
without replacement). The guarantee is the simulated deployment's, not the 1,000 clients' of this dataset.
Prints one JSON line per setting as it finishes. Needs ../shared/data/mnist (or ``--dir``).

    python bench/privacy.py [--rounds 100] [--epsilons 8 4 2 1] [--clip 1.0] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from mnist_tree import mnist_tree

from fedsim import Simulation
from fedsim.sim.summary import strict

ROOT = Path(__file__).resolve().parent.parent


def config(args: argparse.Namespace, privacy: dict[str, Any] | None) -> dict[str, Any]:
    tree = mnist_tree("privacy-mnist", args.dir, 1000, 0.3, 50, args.rounds, args.threads)
    tree["executor"] = {"kind": "auto", "clients": 25}
    if privacy is not None:
        tree["privacy"] = privacy
    return tree


def settings(args: argparse.Namespace) -> list[tuple[str, dict[str, Any] | None]]:
    pfl = {"delta": 1e-6, "noise_cohort": args.noise_cohort, "population": args.population}
    central = {"kind": "central", "clip": args.clip, **pfl}
    table: list[tuple[str, dict[str, Any] | None]] = [("non-private", None)]
    table.append(("clipping only", {**central, "noise_multiplier": 0.0}))
    table += [(f"epsilon {e:g}", {**central, "target_epsilon": e}) for e in args.epsilons]
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=ROOT.parent / "shared" / "data" / "mnist")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[8.0, 4.0, 2.0, 1.0])
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--noise-cohort", type=int, default=1000)
    parser.add_argument("--population", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    for name, privacy in settings(args):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            sim = Simulation(config(args, privacy), out=Path(tmp) / "out", db=Path(tmp) / "runs.db")
            summary = sim.run()
            wall = time.perf_counter() - t0
        spent = summary.privacy
        line = {
            "bench": "privacy",
            "setting": name,
            "clients": 1000,
            "per_round": 50,
            "rounds": summary.rounds,
            "final_accuracy": round(summary.final_accuracy, 4),
            "epsilon": spent.get("epsilon"),
            "delta": spent.get("delta"),
            "noise_multiplier": spent.get("noise_multiplier"),
            "clip": spent.get("clip"),
            "noise_cohort": spent.get("cohort"),
            "population": spent.get("population"),
            "accountant": spent.get("accountant"),
            "executor": summary.executor,
            "wall_s": round(wall, 1),
        }
        print(json.dumps(strict(line)), flush=True)  # clipping alone spends an unbounded epsilon: null


if __name__ == "__main__":
    main()
