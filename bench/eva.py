"""Rounds and wall time to FedAvg-SGD's final accuracy: the client optimiser SGD against Eva (and Adam).

The quickstart (examples/quickstart.yaml: digits, Dirichlet(0.5) over 100 clients, 50 a round, the GroupNorm CNN,
2 local epochs of batch 16, 40 rounds), evaluated every round. For each seed, plain SGD at the quickstart's rate
sets the target, its accuracy after the last round; every optimiser then reports the first round its global
model reaches the target and the wall seconds of the rounds up to it (evaluation not counted), or null where it
never does. ``sgd_momentum`` and ``eva`` both use momentum 0.9 (Eva is momentum SGD on preconditioned
gradients, so momentum SGD is its like-for-like baseline); ``adam`` runs at rate 0.001. One JSON line per
optimiser (medians over the seeds, and each seed's figures).

    python bench/eva.py [--seeds 0 1 2] [--rounds 40] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any

from fedsim.api.launch import execute
from fedsim.config import load_tree, parse_config
from fedsim.runstore import RunStore

ROOT = Path(__file__).resolve().parents[1]
OPTIMIZERS: dict[str, dict[str, Any]] = {
    "sgd": {},
    "sgd_momentum": {"client_optimizer": {"momentum": 0.9}},
    "eva": {"client_optimizer": {"kind": "eva", "momentum": 0.9}},
    "adam": {"client_optimizer": {"kind": "adam"}, "lr": 0.001},
}
Curve = list[tuple[float, float]]  # per round: (test accuracy, the round's seconds without evaluation)


def curve(name: str, seed: int, args: argparse.Namespace) -> Curve:
    tree = load_tree(ROOT / "examples" / "quickstart.yaml", [])
    tree |= {"seed": seed, "rounds": args.rounds, "eval_every": 1, "threads": args.threads, "progress": False}
    tree["algorithm"] = tree["algorithm"] | OPTIMIZERS[name]
    with tempfile.TemporaryDirectory() as tmp:
        summary = execute(parse_config(tree), Path(tmp) / "out", Path(tmp) / "runs.db")
        with RunStore(Path(tmp) / "runs.db") as store:
            rows = store.rounds(summary.run_id)
    return [(float(r.test_accuracy or 0.0), r.train_s) for r in rows]


def reached(points: Curve, target: float) -> tuple[int | None, float | None]:
    """The first round (1-based) at or above ``target``, and the training seconds of the rounds up to it."""
    seconds = 0.0
    for i, (accuracy, spent) in enumerate(points):
        seconds += spent
        if accuracy >= target:
            return i + 1, round(seconds, 3)
    return None, None


def median(values: list[Any]) -> float | None:
    """The median over seeds, a seed that never reached the target counting as infinitely late (None)."""
    middle = statistics.median(math.inf if v is None else v for v in values)
    return None if math.isinf(middle) else middle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--optimizers", nargs="+", default=list(OPTIMIZERS), choices=list(OPTIMIZERS))
    args = parser.parse_args()
    curves = {name: [curve(name, seed, args) for seed in args.seeds] for name in ["sgd", *args.optimizers]}
    targets = [points[-1][0] for points in curves["sgd"]]  # SGD's final accuracy, seed by seed
    for name in args.optimizers:
        hits = [reached(points, target) for points, target in zip(curves[name], targets, strict=True)]
        rounds = [h[0] for h in hits]
        seconds = [h[1] for h in hits]
        finals = [points[-1][0] for points in curves[name]]
        per_round = [statistics.mean(s for _, s in points) for points in curves[name]]
        line = {
            "bench": "eva",
            "optimizer": name,
            "rounds": args.rounds,
            "target": [round(t, 4) for t in targets],
            "rounds_to_target": rounds,
            "seconds_to_target": seconds,
            "median_rounds_to_target": median(rounds),
            "median_seconds_to_target": median(seconds),
            "final_accuracy": round(statistics.mean(finals), 4),
            "final_accuracies": [round(f, 4) for f in finals],
            "round_s": round(statistics.median(per_round), 4),
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
