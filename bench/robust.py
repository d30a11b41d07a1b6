"""Poisoned clients against robust aggregation on MNIST: one JSON line per (fraction, attack, aggregator).

100 clients with Dirichlet(0.5) label skew of MNIST's 60,000 training images, the small GroupNorm CNN, 20
clients a round (fixed-size cohorts), 1 local epoch of batch 16 at lr 0.05, ``--rounds`` rounds; a
``--fraction`` of the clients malicious (fixed by the seed; 0.2 by default, issue 28's table; several values
sweep). Attacks: none (the clean runs, once), sign flip (``-4 x``), ALIE at the paper's z (0.385 for 4 of 20)
and at z = 11 (``alie_z11``), IPM (epsilon 0.1), label flip, a backdoor (a 3x3 trigger, target 0, half of each
attacker's samples, its update boosted 5x: model replacement), Shejwalkar & Houmansadr's min-max and min-sum
(the std perturbation), Fang et al.'s full-knowledge attacks on trimmed mean / median (``fang_trim``) and
on Krum (``fang_krum``), and Shejwalkar & Houmansadr's aggregation-tailored attack (``tailored``: against the
run's rule where it is the trimmed mean, the median, multi-Krum or Bulyan, knowing its settings, else against
the median).
Aggregators: mean (FedAvg), median, trimmed mean (``trim`` = the fraction: as many dropped from each end as a
round holds attackers on average), multi-Krum and Bulyan (both assuming ``f = round(fraction x 20)``
attackers; Bulyan needs ``4f + 3`` clients, so it is refused past f = 4), the
geometric median, centered clipping (radius 0.5), norm bounding (1.0; honest updates measure 0.5 to 3 here),
FLTrust (100 clean root samples), FLAME (lambda 0.001) and DnC (Shejwalkar & Houmansadr's defence, the same
``f``). Each line: the clean test accuracy, its drop from
clean FedAvg, and for the backdoor its success rate on the triggered test images; a configuration fedsim
refuses is a line with the refusal. Needs ../shared/data/mnist (or ``--dir``).

    python bench/robust.py [--dataset digits] [--fraction 0.1 0.2 0.3] [--rounds 20] [--attacks ...] [--aggregators ...]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from mnist_tree import mnist_tree

from fedsim import Simulation
from fedsim.config import ConfigError, parse_config
from fedsim.robust.attacks.tailored import TailoredConfig
from fedsim.sim.rounds.summary import strict

ROOT = Path(__file__).resolve().parent.parent
PER_ROUND = 20
ATTACKS: dict[str, dict[str, Any]] = {
    "none": {},
    "sign_flip": {"kind": "sign_flip", "scale": 4.0},
    "alie": {"kind": "alie"},
    "alie_z11": {"kind": "alie", "z": 11.0},
    "ipm": {"kind": "ipm", "epsilon": 0.1},
    "label_flip": {"kind": "label_flip"},
    "backdoor": {"kind": "backdoor", "target": 0, "scale": 5.0, "poison_fraction": 0.5},
    "min_max": {"kind": "min_max", "perturbation": "std"},
    "min_sum": {"kind": "min_sum", "perturbation": "std"},
    "fang_trim": {"kind": "fang_trim"},
    "fang_krum": {"kind": "fang_krum"},
    "tailored": {"kind": "agr_tailored"},  # against the run's rule where it is one of TAILORED, else the median
}
TAILORED = ("trimmed_mean", "median", "multi_krum", "bulyan")  # the rules Shejwalkar & Houmansadr tailor to
AGGREGATORS = (
    "mean", "median", "trimmed_mean", "multi_krum", "bulyan", "geometric_median", "centered_clip", "norm_bound",
    "fltrust", "flame", "dnc",
)  # fmt: skip


def aggregator(name: str, fraction: float) -> dict[str, Any]:
    """The rule's settings at ``fraction`` attackers: those that assume a number of attackers assume the
    round's average."""
    byzantine = round(fraction * PER_ROUND)
    rules: dict[str, dict[str, Any]] = {
        "mean": {"kind": "none"},  # the weighted mean: no rule
        "median": {"kind": "median"},
        "trimmed_mean": {"kind": "trimmed_mean", "trim": fraction},
        "multi_krum": {"kind": "multi_krum", "byzantine": byzantine},
        "bulyan": {"kind": "bulyan", "byzantine": byzantine},
        "geometric_median": {"kind": "geometric_median"},
        "centered_clip": {"kind": "centered_clip", "radius": 0.5},
        "norm_bound": {"kind": "norm_bound", "bound": 1.0},
        "fltrust": {"kind": "fltrust", "root_samples": 100},
        "flame": {"kind": "flame", "noise": 0.001},
        "dnc": {"kind": "dnc", "byzantine": byzantine},
    }
    return rules[name]


def dataset_tree(args: argparse.Namespace) -> dict[str, Any]:
    """The run before its attack and rule: MNIST's (the module's setting), or the quickstart's (scikit-learn's
    digits, 100 clients, Dirichlet(0.5), its CNN and FedAvg) at this bench's 20 clients a round."""
    if args.dataset == "mnist":
        return mnist_tree("robust-mnist", args.dir, 100, 0.5, PER_ROUND, args.rounds, args.threads)
    tree = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    more = {"name": "robust-digits", "format": 2, "clients_per_round": PER_ROUND, "rounds": args.rounds}
    return tree | more | {"eval_every": args.rounds, "progress": False, "threads": args.threads}


def config(args: argparse.Namespace, attack: dict[str, Any], rule: dict[str, Any], fraction: float) -> dict[str, Any]:
    tree = dataset_tree(args)
    if attack.get("kind") == "agr_tailored":  # the attacker knows the rule, and the settings it assumes of it
        against = rule["kind"] if rule["kind"] in TAILORED else "median"
        names = TailoredConfig.assumes[against]
        known = {name: rule[name] for name in names if name in rule and name in TailoredConfig.model_fields}
        attack = {**attack, "against": against, **known}
    return {**tree, "aggregator": rule, "attack": {**attack, "fraction": fraction} if attack else {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", choices=["mnist", "digits"], default="mnist", help="digits: the quickstart's")
    parser.add_argument("--dir", type=Path, default=ROOT.parent / "shared" / "data" / "mnist")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--fraction", type=float, nargs="+", default=[0.2], help="shares of malicious clients")
    parser.add_argument("--attacks", nargs="+", default=list(ATTACKS), choices=list(ATTACKS))
    parser.add_argument("--aggregators", nargs="+", default=list(AGGREGATORS), choices=list(AGGREGATORS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--alie-z", type=float, default=None, help="ALIE's z; default the paper's formula")
    parser.add_argument("--clean", type=float, default=None, help="clean FedAvg's accuracy, when not run here")
    args = parser.parse_args()
    if args.alie_z is not None:
        ATTACKS["alie"] = {"kind": "alie", "z": args.alie_z}
    clean: float | None = args.clean
    attacks = (["none"] if "none" in args.attacks else []) + [a for a in args.attacks if a != "none"]
    for fraction in args.fraction:
        for attack in attacks:
            if attack == "none" and fraction != args.fraction[0]:
                continue  # the clean runs do not depend on the fraction
            for name in args.aggregators:
                rule = aggregator(name, fraction)
                tree = config(args, ATTACKS[attack], rule, fraction)
                line: dict[str, Any] = {
                    "bench": "robust",
                    "dataset": args.dataset,
                    "attack": attack,
                    "aggregator": name,
                    "malicious": fraction if attack != "none" else 0.0,
                }
                try:
                    parse_config(tree)
                except ConfigError as error:
                    print(json.dumps({**line, "refused": str(error)}), flush=True)
                    continue
                with tempfile.TemporaryDirectory() as tmp:
                    t0 = time.perf_counter()
                    summary = Simulation(tree, out=Path(tmp) / "out", db=Path(tmp) / "runs.db").run()
                    wall = time.perf_counter() - t0
                accuracy = summary.final_accuracy
                if attack == "none" and name == "mean":
                    clean = accuracy
                line |= {
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
