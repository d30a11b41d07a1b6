"""BatchNorm against GroupNorm under label skew (Hsieh et al. 2020, section 5): four accuracies.

Workload: scikit-learn's digits over 5 partitions, 0% and 100% non-IID (the x%-non-IID label-skew partitioner:
x% of the data is split by label, the rest spread iid), the CNN of the quickstart (two conv blocks, 16 and 32
channels) with BatchNorm or GroupNorm (4 groups), FedAvg with every partition in every round, 40 rounds of 8
local steps (batch 16, lr 0.05). Accuracy is the global model's on the held-out 20%, median over seeds.
BatchNorm's running statistics are averaged like any other buffer.

    python bench/norm_skew.py [--rounds 40] [--local-steps 8] [--seeds 0,1,2] [--batch-size 16] [--lr 0.05]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from fedsim.config import parse_config
from fedsim.sim.engine import Engine


def accuracy(norm: str, skew: float, seed: int, args: argparse.Namespace, workdir: Path) -> float:
    cfg = parse_config(
        {
            "name": f"norm-{norm}-{skew}",
            "seed": seed,
            "rounds": args.rounds,
            "eval_every": 0,
            "threads": 1,
            "progress": False,
            "data": {"dataset": "digits", "clients": 5, "partition": {"kind": "label_skew", "skew": skew}},
            "model": {"kind": "cnn", "norm": norm, "groups": 4},
            "algorithm": {
                "name": "fedavg",
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
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--local-steps", type=int, default=8)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()
    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    result: dict[tuple[str, float], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for norm in ("batch", "group"):
            for skew in (0.0, 1.0):
                accs = [accuracy(norm, skew, s, args, Path(tmp)) for s in seeds]
                result[norm, skew] = statistics.median(accs)
                line = {"bench": "norm_skew", "norm": norm, "skew": skew, "test_accuracy": round(result[norm, skew], 4)}
                print(json.dumps({**line, "accuracies": [round(a, 4) for a in accs]}), flush=True)
    gaps = {norm: round(100 * (result[norm, 0.0] - result[norm, 1.0]), 2) for norm in ("batch", "group")}
    print(json.dumps({"bench": "norm_skew", "gap_points": gaps, "batchnorm_gap_larger": gaps["batch"] > gaps["group"]}))


if __name__ == "__main__":
    main()
