"""Poisoned clients against robust aggregation on MNIST: one JSON line per (attack, aggregator).

100 clients with Dirichlet(0.5) label skew of MNIST's 60,000 training images, the small GroupNorm CNN, 20
clients a round (fixed-size cohorts), 1 local epoch of batch 16 at lr 0.05, ``--rounds`` rounds; 20% of the
clients malicious (fixed by the seed). Attacks: none (the clean runs), sign flip (``-4 x``), ALIE at the
paper's z (0.385 for 4 of 20) and at z = 11 (``alie_z11``: the least whole z at which it costs the mean 10
points here), IPM (epsilon 0.1), label flip, and a backdoor (a 3x3 trigger, target 0, half of each attacker's samples,
its update boosted 5x: model replacement); when named, Shejwalkar & Houmansadr's min-max and min-sum (the
std perturbation) from examples/own_attack.py. Aggregators: mean (FedAvg), median, trimmed mean (20% each end),
multi-Krum and Bulyan (both assuming f = 4 attackers of 20), geometric median, centered clipping (radius
0.5) and norm bounding (1.0; honest updates measure 0.5 to 3 here). Each line: the clean test accuracy, its
drop from clean FedAvg, and for the backdoor its success rate on the triggered test images. Needs
../shared/data/mnist (or ``--dir``).

    python bench/robust.py [--rounds 20] [--attacks ...] [--aggregators ...] [--threads 1]
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
from fedsim.sim.rounds.summary import strict

ROOT = Path(__file__).resolve().parent.parent
FRACTION, BYZANTINE = 0.2, 4
ATTACKS: dict[str, dict[str, Any]] = {
    "none": {},
    "sign_flip": {"kind": "sign_flip", "scale": 4.0},
    "alie": {"kind": "alie"},
    "alie_z11": {"kind": "alie", "z": 11.0},
    "ipm": {"kind": "ipm", "epsilon": 0.1},
    "label_flip": {"kind": "label_flip"},
    "backdoor": {"kind": "backdoor", "target": 0, "scale": 5.0, "poison_fraction": 0.5},
    # Shejwalkar & Houmansadr's attacks, from examples/own_attack.py (a stage of one's own, no edit to fedsim)
    "min_max": {"factory": str(ROOT / "examples" / "own_attack.py") + ":MinMax"},
    "min_sum": {"factory": str(ROOT / "examples" / "own_attack.py") + ":MinSum"},
}
AGGREGATORS: dict[str, dict[str, Any]] = {
    "mean": {"kind": "mean"},
    "median": {"kind": "median"},
    "trimmed_mean": {"kind": "trimmed_mean", "trim": 0.2},
    "multi_krum": {"kind": "multi_krum", "byzantine": BYZANTINE},
    "bulyan": {"kind": "bulyan", "byzantine": BYZANTINE},
    "geometric_median": {"kind": "geometric_median"},
    "centered_clip": {"kind": "centered_clip", "radius": 0.5},
    "norm_bound": {"kind": "norm_bound", "bound": 1.0},
}


def config(args: argparse.Namespace, attack: dict[str, Any], aggregator: dict[str, Any]) -> dict[str, Any]:
    tree = mnist_tree("robust-mnist", args.dir, 100, 0.5, 20, args.rounds, args.threads)
    return {**tree, "aggregator": aggregator, "attack": {**attack, "fraction": FRACTION} if attack else {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=ROOT.parent / "shared" / "data" / "mnist")
    parser.add_argument("--rounds", type=int, default=20)
    defaults = [a for a in ATTACKS if a not in ("min_max", "min_sum")]  # the table's; the rest when named
    parser.add_argument("--attacks", nargs="+", default=defaults, choices=list(ATTACKS))
    parser.add_argument("--aggregators", nargs="+", default=list(AGGREGATORS), choices=list(AGGREGATORS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--alie-z", type=float, default=None, help="ALIE's z; default the paper's formula")
    args = parser.parse_args()
    if args.alie_z is not None:
        ATTACKS["alie"] = {"kind": "alie", "z": args.alie_z}
    clean: float | None = None
    for attack in args.attacks:
        for aggregator in args.aggregators:
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                tree = config(args, ATTACKS[attack], AGGREGATORS[aggregator])
                summary = Simulation(tree, out=Path(tmp) / "out", db=Path(tmp) / "runs.db").run()
                wall = time.perf_counter() - t0
            accuracy = summary.final_accuracy
            if attack == "none" and aggregator == "mean":
                clean = accuracy
            line = {
                "bench": "robust",
                "attack": attack,
                "aggregator": aggregator,
                "malicious": FRACTION if attack != "none" else 0.0,
                "rounds": summary.rounds,
                "final_accuracy": round(accuracy, 4),
                "drop_vs_clean_fedavg": round(clean - accuracy, 4) if clean is not None else None,
                "backdoor_success": summary.attack.get("backdoor_success") if attack == "backdoor" else None,
                "executor": summary.executor,
                "wall_s": round(wall, 1),
            }
            print(json.dumps(strict(line)), flush=True)


if __name__ == "__main__":
    main()
