"""BatchNorm against GroupNorm under label skew (Hsieh et al. 2020, section 5): four accuracies and two gaps.

Default workload: scikit-learn's digits over 5 partitions, 0% and 100% non-IID (the x%-non-IID label-skew
partitioner: x% of the data is split by label, the rest spread iid), the CNN of the quickstart (two conv blocks,
16 and 32 channels) with BatchNorm or GroupNorm (4 groups), FedAvg with every partition in every round, 40
rounds of 8 local steps (batch 16, lr 0.05). Accuracy is the global model's on the held-out 20%.
BatchNorm's running statistics are averaged like any other buffer.

``--mnist`` is the paper's setting on MNIST (../shared/data/mnist): 10 partitions, at 100% skew one label
each (``label % P``), every-step averaging (one local step per round: synchronous SGD over the partitions'
batches, each normalised by its own batch statistics), 600 steps of batch 20, lr 0.05, tested on the 10,000
test images. Each seed gives each norm a gap (0% minus 100% skew, points); the last line has the mean gaps.

    python bench/norm_skew.py [--mnist] [--rounds 40] [--local-steps 8] [--seeds 0,1,2] [--batch-size 16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from fedsim.config import parse_config
from fedsim.sim.rounds.engine import Engine

MNIST = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mnist"


def accuracy(norm: str, skew: float, seed: int, args: argparse.Namespace, workdir: Path) -> float:
    cfg = parse_config(
        {
            "name": f"norm-{norm}-{skew}",
            "seed": seed,
            "rounds": args.rounds,
            "eval_every": 0,
            "threads": 1,
            "progress": False,
            "clients_per_round": args.partitions,
            "data": {
                "dataset": "mnist" if args.mnist else "digits",
                "clients": args.partitions,
                "partition": {"kind": "label_skew", "skew": skew},
                **({"dir": str(MNIST)} if args.mnist else {}),
            },
            "model": {"kind": "cnn", "norm": norm, "groups": 4},
            "algorithm": {
                "kind": "fedavg",
                "lr": args.lr,
                "batch_size": args.batch_size,
                "local_steps": args.local_steps,
            },
        }
    )
    out = workdir / f"{norm}-{skew}-{seed}"
    return Engine(cfg, out_dir=out, db_path=workdir / "fedsim.db").run().final_accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mnist", action="store_true", help="MNIST, 10 partitions, every-step averaging")
    parser.add_argument("--rounds", type=int, default=None, help="default 40 (digits), 600 (--mnist)")
    parser.add_argument("--local-steps", type=int, default=None, help="default 8 (digits), 1 (--mnist)")
    parser.add_argument("--partitions", type=int, default=None, help="default 5 (digits), 10 (--mnist)")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--batch-size", type=int, default=None, help="default 16 (digits), 20 (--mnist)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    for name, digits, mnist in (
        ("rounds", 40, 600),
        ("local_steps", 8, 1),
        ("partitions", 5, 10),
        ("batch_size", 16, 20),
    ):
        if getattr(args, name) is None:
            setattr(args, name, mnist if args.mnist else digits)
    torch.set_num_threads(args.threads)
    seeds = [int(s) for s in args.seeds.split(",")]
    result: dict[tuple[str, float], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for norm in ("batch", "group"):
            for skew in (0.0, 1.0):
                accs = [accuracy(norm, skew, s, args, Path(tmp)) for s in seeds]
                result[norm, skew] = accs
                line = {
                    "bench": "norm_skew",
                    "norm": norm,
                    "skew": skew,
                    "test_accuracy": round(statistics.mean(accs), 4),
                }
                print(json.dumps({**line, "accuracies": [round(a, 4) for a in accs]}), flush=True)
    per_seed = {
        norm: [round(100 * (a - b), 2) for a, b in zip(result[norm, 0.0], result[norm, 1.0], strict=True)]
        for norm in ("batch", "group")
    }
    gaps = {norm: round(statistics.mean(g), 2) for norm, g in per_seed.items()}
    print(
        json.dumps(
            {
                "bench": "norm_skew",
                "dataset": "mnist" if args.mnist else "digits",
                "gap_points": gaps,
                "gaps_per_seed": per_seed,
                "batchnorm_gap_minus_groupnorm": round(gaps["batch"] - gaps["group"], 2),
                "batchnorm_gap_larger": gaps["batch"] > gaps["group"],
            }
        )
    )


if __name__ == "__main__":
    main()
