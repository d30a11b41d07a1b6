"""What SecAgg+ costs on MNIST: round time, bytes per client and quantization error against the plain sum.

The privacy bench's setting (1,000 clients with Dirichlet(0.3) label skew of MNIST, the small GroupNorm CNN,
50 clients a round, 1 local epoch of batch 16 at lr 0.05), ``--rounds`` rounds, run plainly and under SecAgg+
with Flower's defaults (clipping range 8, 2^22 quantization levels, modulus 2^32, max weight 1000) and
neighbourhoods of 5 (threshold 3), 11 (6) and the whole cohort (51 around a ring of 50: 50, threshold 26,
SecAgg without the "+"), and 5 (3) with 10% of each round's clients dropping out after sharing their keys.
Each line: seconds per round (median), the ratio to the plain run's, each client's upload (the plain float32
update, or SecAgg+'s masked vector, keys and shares), the mean relative quantization error of the unmasked
sums, failed rounds, and final test accuracy. Needs ../shared/data/mnist (or ``--dir``).

    python bench/secagg.py [--rounds 20] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from mnist_tree import mnist_tree

from fedsim import Simulation
from fedsim.runstore import RunStore
from fedsim.sim.rounds.summary import strict

ROOT = Path(__file__).resolve().parent.parent
SETTINGS: list[tuple[str, dict[str, Any] | None, float]] = [
    ("plain", None, 0.0),
    ("secagg 5/3", {"kind": "secagg_plus", "num_shares": 5, "reconstruction_threshold": 3}, 0.0),
    ("secagg 11/6", {"kind": "secagg_plus", "num_shares": 11, "reconstruction_threshold": 6}, 0.0),
    ("secagg 50/26 (all pairs)", {"kind": "secagg_plus", "num_shares": 50, "reconstruction_threshold": 26}, 0.0),
    ("secagg 5/3, 10% dropout", {"kind": "secagg_plus", "num_shares": 5, "reconstruction_threshold": 3}, 0.1),
]


def config(args: argparse.Namespace, secagg: dict[str, Any] | None, dropout: float) -> dict[str, Any]:
    tree = mnist_tree("secagg-mnist", args.dir, 1000, 0.3, 50, args.rounds, args.threads)
    return {**tree, "emulation": {"dropout": dropout}, "secagg": secagg or {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=ROOT.parent / "shared" / "data" / "mnist")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    plain_s = None
    for name, secagg, dropout in SETTINGS:
        with tempfile.TemporaryDirectory() as tmp:
            sim = Simulation(config(args, secagg, dropout), out=Path(tmp) / "out", db=Path(tmp) / "runs.db")
            summary = sim.run()
            with RunStore.open_readonly(Path(tmp) / "runs.db") as store:
                rounds = store.rounds(summary.run_id)
        per_round = statistics.median(r.wall_s for r in rounds[1:] or rounds)  # the first warms the caches
        plain_s = plain_s or per_round
        clients = sum(r.clients for r in rounds)
        protocol = summary.secagg
        line = {
            "bench": "secagg",
            "setting": name,
            "rounds": summary.rounds,
            "per_round": 50,
            "round_s": round(per_round, 3),
            "vs_plain": round(per_round / plain_s, 3),
            "bytes_up_per_client": round(protocol["bytes_up_per_client"]) if protocol else summary.bytes_up // clients,
            "bytes_down_per_client_protocol": round(protocol["bytes_down_per_client"]) if protocol else 0,
            "quantization_error": protocol.get("quantization_error") if protocol else None,
            "failed_rounds": len(protocol.get("failed_rounds", [])) if protocol else 0,
            "final_accuracy": round(summary.final_accuracy, 4),
            "executor": summary.executor,
        }
        print(json.dumps(strict(line)), flush=True)


if __name__ == "__main__":
    main()
