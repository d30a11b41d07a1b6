"""D-PSGD, DmSGD and DecentLaM on ring and exponential graphs, at a small and a large batch, under label skew.

Two workloads, each with 16 nodes (clients) whose data are Dirichlet(0.5) label-skewed splits: ``quickstart``
(scikit-learn's digits and the quickstart's GroupNorm CNN) and ``mnist`` (../shared/data/mnist and a 784-128-10
MLP). Every node takes one stochastic gradient a round and gossips over the graph; the batch is 16 or 256
samples, at the rate ``--lr`` for batch 16 scaled linearly with the batch for 256 (Goyal et al.'s rule, as the
DecentLaM paper's large-batch runs use it, capped at ``--max-lr``), momentum 0.9 for DmSGD and DecentLaM. One JSON
line per (workload, graph, batch, algorithm) gives the average model's final test accuracy (mean and per seed)
and the final consensus distance ``(1/n) sum_i ||x_i - x_bar||^2``; a last line per workload and graph compares
DecentLaM with DmSGD at the large batch (the paper's claim: DecentLaM >= DmSGD, most of all at large batches).
``exponential`` is the symmetric exponential graph (DecentLaM assumes a symmetric W; on Ying et al.'s directed one,
``exponential_directed``, its consensus heavy ball has spectral radius 1.25 at momentum 0.9 and diverges). A run
whose consensus distance is not finite counts as diverged; its accuracy is still reported.

    python bench/decentralised.py [--workloads quickstart mnist] [--seeds 0 1 2] [--rounds 300] [--lr 0.02]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from fedsim.config import parse_config
from fedsim.sim.launch import execute

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = ("dpsgd", "dmsgd", "decentlam")


def tree(workload: str, args: argparse.Namespace, graph: str, batch: int, name: str, seed: int) -> dict[str, Any]:
    lr = min(args.lr * batch / 16, args.max_lr)
    if workload == "quickstart":
        data = {"dataset": "digits", "test_fraction": 0.2}
        model = {"kind": "cnn", "norm": "group", "groups": 4}
    else:
        data = {"dataset": "mnist", "dir": str(args.dir)}
        model = {"kind": "mlp", "hidden": [128]}
    algorithm = {"name": name, "lr": lr, "batch_size": batch} | ({} if name == "dpsgd" else {"momentum": 0.9})
    return {
        "name": f"decentralised-{workload}-{graph}-{batch}-{name}",
        "seed": seed,
        "rounds": args.rounds,
        "eval_every": 0,
        "threads": args.threads,
        "progress": False,
        "data": data | {"clients": args.nodes, "partition": {"kind": "dirichlet", "alpha": 0.5}},
        "model": model,
        "algorithm": algorithm,
        "topology": {"kind": "exponential", "directed": True} if graph == "exponential_directed" else topology(graph),
    }


def topology(graph: str) -> dict[str, Any]:
    """``exponential`` is the symmetric exponential graph (i and i +- 2^k), the W DecentLaM's analysis assumes;
    ``exponential_directed`` Ying et al.'s one-way form."""
    return {"kind": "exponential", "directed": False} if graph == "exponential" else {"kind": graph}


def run(config: dict[str, Any]) -> tuple[float | None, float | None, float]:
    """(final accuracy of the average model, final consensus distance, wall seconds); the consensus distance is
    None where the run diverged (not a finite number)."""
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        execute(parse_config(config), Path(tmp) / "out", Path(tmp) / "runs.db")
        fields = json.loads((Path(tmp) / "out" / "summary.json").read_text())
        return fields["final_accuracy"], fields["consensus_distance"], time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=["quickstart", "mnist"], choices=["quickstart", "mnist"])
    parser.add_argument("--graphs", nargs="+", default=["ring", "exponential"], help="or exponential_directed, torus")
    parser.add_argument("--batches", nargs="+", type=int, default=[16, 256])
    parser.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), choices=ALGORITHMS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.02, help="the rate at batch 16")
    parser.add_argument("--max-lr", type=float, default=0.32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=ROOT.parent / "shared" / "data" / "mnist")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for workload in args.workloads:
        for graph in args.graphs:
            large: dict[str, float] = {}
            for batch in args.batches:
                for name in args.algorithms:
                    runs = [run(tree(workload, args, graph, batch, name, seed)) for seed in args.seeds]
                    accuracy = [r[0] if r[0] is not None else float("nan") for r in runs]
                    distances = [r[1] for r in runs if r[1] is not None]
                    line = {
                        "bench": "decentralised",
                        "workload": workload,
                        "graph": graph,
                        "batch": batch,
                        "algorithm": name,
                        "lr": min(args.lr * batch / 16, args.max_lr),
                        "rounds": args.rounds,
                        "nodes": args.nodes,
                        "accuracy": round(statistics.mean(accuracy), 4),
                        "accuracy_sd": round(statistics.stdev(accuracy), 4) if len(accuracy) > 1 else 0.0,
                        "accuracies": [round(a, 4) for a in accuracy],
                        "consensus": float(f"{statistics.mean(distances):.4g}") if distances else None,
                        "diverged": len(runs) - len(distances),
                        "run_s": round(statistics.mean(r[2] for r in runs), 1),
                    }
                    print(json.dumps(line), flush=True)
                    if batch == max(args.batches):
                        large[name] = line["accuracy"]
            if {"dmsgd", "decentlam"} <= large.keys():
                gap = large["decentlam"] - large["dmsgd"]
                verdict = {"decentlam_minus_dmsgd": round(gap, 4), "decentlam_at_least_dmsgd": gap >= 0}
                print(json.dumps({"bench": "decentralised", "workload": workload, "graph": graph, **verdict}))


if __name__ == "__main__":
    main()
