"""What privacy costs on MNIST: non-private FedAvg, clipping only, central DP at epsilon 8, 4, 2 and 1, and DP at
epsilon 2 beside the EF-sign uplink compressor.

1,000 clients with Dirichlet(0.3) label skew of MNIST's 60,000 training images, a small GroupNorm CNN, 50
clients a round (fixed-size cohorts), 1 local epoch of batch 16 at lr 0.05, ``--rounds`` rounds; accuracy on
the 10,000 test images after the last. The private runs clip each client's update to ``--clip`` and add the
noise pfl-research's benchmarks add: a noise cohort of ``--noise-cohort`` clients out of a population of
``--population`` (a deployment that samples 1,000 of a million users a round), delta 1e-6, the noise
multiplier calibrated before round 0 for each target epsilon with dp-accounting's RDP accountant (sampling
without replacement, replace-one neighbours: sensitivity 2C). The target is the simulated deployment's
(``deployment_epsilon``); ``epsilon`` is the run as executed, 1,000 clients whose cohort of 50 got the noise
of a cohort of 1,000, which spends far more. Every private row also audits itself with ``--canaries``
canary clients (Andrew et al. 2024, one-shot): ``epsilon_estimate`` is the empirical estimate from the final
model, beside the run's accountant. Prints one JSON line per setting as it finishes, with the bytes each sent
up. Needs ../shared/data/mnist (or ``--dir``).

    python bench/privacy.py [--rounds 100] [--epsilons 8 4 2 1] [--clip 1.0] [--canaries 20] [--threads 2]
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


def config(args: argparse.Namespace, privacy: dict[str, Any] | None, uplink: dict[str, Any] | None) -> dict[str, Any]:
    tree = mnist_tree("privacy-mnist", args.dir, 1000, 0.3, 50, args.rounds, args.threads)
    tree["executor"] = {"kind": "auto", "clients": 25}
    if privacy is not None:
        tree["privacy"] = privacy
    if uplink is not None:
        tree["uplink"] = uplink
    return tree


def settings(args: argparse.Namespace) -> list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]]:
    """(name, privacy, uplink) of each row."""
    pfl = {"delta": 1e-6, "noise_cohort": args.noise_cohort, "population": args.population}
    central = {"kind": "central", "clip": args.clip, **pfl}
    if args.canaries:
        central["audit"] = {"canaries": args.canaries}
    table: list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]] = [("non-private", None, None)]
    table.append(("clipping only", {**central, "noise_multiplier": 0.0}, None))
    table += [(f"epsilon {e:g}", {**central, "target_epsilon": e}, None) for e in args.epsilons]
    table.append(("epsilon 2, ef_sign uplink", {**central, "target_epsilon": 2.0}, {"kind": "ef_sign"}))
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=ROOT.parent / "shared" / "data" / "mnist")
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[8.0, 4.0, 2.0, 1.0])
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--noise-cohort", type=int, default=1000)
    parser.add_argument("--population", type=int, default=1_000_000)
    parser.add_argument("--canaries", type=int, default=20, help="audit canaries per private row (0: none)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    for name, privacy, uplink in settings(args):
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            sim = Simulation(config(args, privacy, uplink), out=Path(tmp) / "out", db=Path(tmp) / "runs.db")
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
            "deployment_epsilon": spent.get("deployment", {}).get("epsilon"),
            "epsilon": spent.get("epsilon"),
            "epsilon_estimate": spent.get("audit", {}).get("epsilon_estimate"),
            "canaries": spent.get("audit", {}).get("canaries"),
            "delta": spent.get("delta"),
            "noise_multiplier": spent.get("noise_multiplier"),
            "sensitivity": spent.get("sensitivity"),
            "neighbours": spent.get("neighbours"),
            "clip": spent.get("clip"),
            "noise_cohort": spent.get("noise_cohort"),
            "population": spent.get("deployment", {}).get("population"),
            "accountant": spent.get("accountant"),
            "uplink": (uplink or {}).get("kind", "none"),
            "bytes_up": summary.bytes_up,
            "executor": summary.executor,
            "wall_s": round(wall, 1),
        }
        print(json.dumps(strict(line)), flush=True)  # clipping alone spends an unbounded epsilon: null


if __name__ == "__main__":
    main()
