"""SkewScout against always communicating and a fixed loose setting, at 20%, 60% and 100% non-IID.

Workload (Hsieh et al. 2020, scaled to this machine): scikit-learn's digits over 5 partitions with the
x%-non-IID label-skew partitioner, the GroupNorm CNN, FedAvg with every partition in every round (batch 16,
lr 0.05), and the same compute budget for every run: each partition takes ``--budget`` SGD steps. The knob is
local steps per round:

- (a) ``every_step``: 1 local step per round, i.e. communicate after every step (the most conservative);
- (b) ``fixed_loose``: ``--loose`` local steps per round throughout;
- (c) ``skewscout``: starts at the loosest rung of 1..64, probes every ``--probe-every`` rounds with 4 pairs
  on 64 samples, and keeps the estimated loss in the band [1, 3] points.

``bytes`` is everything on the modelled network: model downloads and uploads plus SkewScout's traveling models.
``loss_points`` is (a)'s test accuracy minus this run's, in points; accuracies are medians over ``--seeds``.

    python bench/skewscout.py [--budget 1280] [--loose 64] [--probe-every 10] [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

import torch

from fedsim.config import parse_config
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine

LADDER = [1, 2, 4, 8, 16, 32, 64]


def run(skew: float, control: dict[str, Any], seed: int, workdir: Path) -> dict[str, Any]:
    cfg = parse_config(
        {
            "name": f"skewscout-{skew}",
            "seed": seed,
            "rounds": 1_000_000,  # the step budget ends the run
            "eval_every": 0,
            "threads": 1,
            "progress": False,
            "data": {"dataset": "digits", "clients": 5, "partition": {"kind": "label_skew", "skew": skew}},
            "model": {"kind": "cnn", "norm": "group", "groups": 4},
            "algorithm": {"kind": "fedavg", "lr": 0.05, "batch_size": 16},
            "control": control,
        }
    )
    engine = Engine(cfg, out_dir=workdir / f"{skew}-{control['kind']}-{seed}", db_path=workdir / "fedsim.db")
    summary = engine.run()
    with RunStore.open_readonly(workdir / "fedsim.db") as store:
        decisions = store.decisions(summary.run_id)
    return {
        "accuracy": summary.final_accuracy,
        "bytes": summary.bytes_up + summary.bytes_down,
        "bytes_probe": summary.bytes_probe,
        "rounds": summary.rounds,
        "knobs": [d.new for d in decisions],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=1280, help="SGD steps per partition")
    parser.add_argument("--loose", type=int, default=64)
    parser.add_argument("--probe-every", type=int, default=10)
    parser.add_argument("--skews", default="0.2,0.6,1.0")
    parser.add_argument("--seeds", default="0,1,2")
    args = parser.parse_args()
    torch.set_num_threads(1)
    seeds = [int(s) for s in args.seeds.split(",")]
    settings = {
        "every_step": {"kind": "fixed", "knob": {"ladder": [1]}, "budget_steps": args.budget},
        "fixed_loose": {"kind": "fixed", "knob": {"ladder": [args.loose]}, "budget_steps": args.budget},
        "skewscout": {
            "kind": "skewscout",
            "target": [1.0, 3.0],
            "probe_every": args.probe_every,
            "pairs": 4,
            "sample": 64,
            "knob": {"ladder": LADDER},
            "budget_steps": args.budget,
        },
    }
    with tempfile.TemporaryDirectory() as tmp:
        for skew in (float(s) for s in args.skews.split(",")):
            baseline = None
            for name, control in settings.items():
                runs = [run(skew, control, seed, Path(tmp)) for seed in seeds]
                accuracy = statistics.median(r["accuracy"] for r in runs)
                baseline = accuracy if baseline is None else baseline
                line = {
                    "bench": "skewscout",
                    "skew": skew,
                    "setting": name,
                    "bytes": int(statistics.median(r["bytes"] for r in runs)),
                    "bytes_probe": int(statistics.median(r["bytes_probe"] for r in runs)),
                    "test_accuracy": round(accuracy, 4),
                    "loss_points": round(100 * (baseline - accuracy), 2),
                    "accuracies": [round(r["accuracy"], 4) for r in runs],
                    "rounds": [r["rounds"] for r in runs],
                    "final_knob": [r["knobs"][-1] if r["knobs"] else control["knob"]["ladder"][-1] for r in runs],
                }
                print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
