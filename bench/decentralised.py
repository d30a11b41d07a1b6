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

Then (``--parts lgd``) LGD against FedAvg at about equal bytes: LGD (groups of 4 nodes, pulls 0.1 and 0.1) elects
its leaders every ``--period`` rounds of one gradient step; FedAvg trains all 16 nodes as clients for
``--period`` local steps a round, ``--rounds / --period`` rounds: the same gradient steps, every client's model up
and down once per period against the leaders' models and every node's loss once per period; LGD also at twice
the period, which brings its bytes (up and down) near FedAvg's. Federated LGD (``fedlgd``, on FedAvg's round loop:
every client keeps its own model, pulled 0.1 and 0.1 toward its group's and the global leader as its round
starts; groups of ``i % 4``) trains as FedAvg does, ``--period`` local steps a round, and elects every round:
each client downloads the global and its local leader (FedAvg: the model), uploads a loss (FedAvg: its model), and
the leaders upload theirs; the global leader is the model evaluated. FedAvg and federated LGD also run on IID
shards (``partition: iid``), the setting of the LSGD paper.

    python bench/decentralised.py [--workloads quickstart mnist] [--seeds 0 1 2] [--rounds 300] [--lr 0.02]
        [--parts gossip lgd] [--period 10]
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

from fedsim.api.launch import execute
from fedsim.config import parse_config

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
    algorithm = {"kind": name, "lr": lr, "batch_size": batch} | ({} if name == "dpsgd" else {"momentum": 0.9})
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
    None where the run diverged (not a finite number), and for a federated run."""
    return run_with_bytes(config)[0]


def run_with_bytes(config: dict[str, Any]) -> tuple[tuple[float | None, float | None, float], int]:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        execute(parse_config(config), Path(tmp) / "out", Path(tmp) / "runs.db")
        fields = json.loads((Path(tmp) / "out" / "summary.json").read_text())
        seconds = time.perf_counter() - t0
        return (fields["final_accuracy"], fields.get("consensus_distance"), seconds), fields["bytes_up"] + fields[
            "bytes_down"
        ]


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
    parser.add_argument("--parts", nargs="+", default=["gossip", "lgd"], choices=["gossip", "lgd"])
    parser.add_argument("--period", type=int, default=10, help="LGD's election period, FedAvg's local steps")
    parser.add_argument("--dir", type=Path, default=ROOT.parent / "shared" / "data" / "mnist")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for workload in args.workloads:
        if "gossip" in args.parts:
            for graph in args.graphs:
                gossip_table(workload, graph, args)
        if "lgd" in args.parts:
            lgd_against_fedavg(workload, args)


def gossip_table(workload: str, graph: str, args: argparse.Namespace) -> None:
    large: dict[str, float] = {}
    for batch in args.batches:
        for name in args.algorithms:
            runs = [run(tree(workload, args, graph, batch, name, seed)) for seed in args.seeds]
            line = summary_line(runs) | {"workload": workload, "graph": graph, "batch": batch, "algorithm": name}
            line |= {"lr": min(args.lr * batch / 16, args.max_lr), "rounds": args.rounds, "nodes": args.nodes}
            print(json.dumps({"bench": "decentralised", **line}), flush=True)
            if batch == max(args.batches):
                large[name] = line["accuracy"]
    if {"dmsgd", "decentlam"} <= large.keys():
        gap = large["decentlam"] - large["dmsgd"]
        verdict = {"decentlam_minus_dmsgd": round(gap, 4), "decentlam_at_least_dmsgd": gap >= 0}
        print(json.dumps({"bench": "decentralised", "workload": workload, "graph": graph, **verdict}))


def lgd_against_fedavg(workload: str, args: argparse.Namespace) -> None:
    """LGD electing leaders every ``--period`` rounds of one step, against FedAvg with every node a client and
    ``--period`` local steps a round: the same gradient steps and about the same bytes (FedAvg sends every
    client's model up and down each round; LGD the leaders' models to the nodes and every node's loss)."""
    batch = 16
    period, skew = args.period, "dirichlet"
    settings = [("fedavg", period, skew), ("lgd", period, skew), ("lgd", 2 * period, skew), ("fedlgd", period, skew)]
    settings += [("fedavg", period, "iid"), ("fedlgd", period, "iid")]  # the paper's setting: IID shards
    for name, period, partition in settings:
        runs, sent = [], []
        for seed in args.seeds:
            config = tree(workload, args, "ring", batch, "dpsgd", seed)
            del config["topology"]
            config["data"]["partition"] = {"kind": partition} | ({"alpha": 0.5} if partition == "dirichlet" else {})
            if name == "lgd":
                config["algorithm"] = {"kind": "lgd", "lr": args.lr, "batch_size": batch, "period": period, "groups": 4}
            else:  # FedAvg's round loop, every node a client: period local steps a round
                config["algorithm"] = {"kind": name, "lr": args.lr, "batch_size": batch, "local_steps": period}
                config["algorithm"] |= {"groups": 4} if name == "fedlgd" else {}
                config["rounds"] = args.rounds // period
            result, bytes_total = run_with_bytes(config)
            runs.append(result)
            sent.append(bytes_total)
        line = summary_line(runs, federated=name != "lgd")
        line |= {"workload": workload, "algorithm": name, "partition": partition, "period": period, "lr": args.lr}
        line |= {"steps": args.rounds}
        line |= {"bytes": int(statistics.mean(sent))}
        print(json.dumps({"bench": "decentralised_lgd", **line}), flush=True)


def summary_line(runs: list[tuple[float | None, float | None, float]], federated: bool = False) -> dict[str, Any]:
    accuracy = [r[0] if r[0] is not None else float("nan") for r in runs]
    distances = [r[1] for r in runs if r[1] is not None]
    line = {
        "accuracy": round(statistics.mean(accuracy), 4),
        "accuracy_sd": round(statistics.stdev(accuracy), 4) if len(accuracy) > 1 else 0.0,
        "accuracies": [round(a, 4) for a in accuracy],
        "run_s": round(statistics.mean(r[2] for r in runs), 1),
    }
    if federated:  # one global model: no consensus to measure
        return line
    consensus = float(f"{statistics.mean(distances):.4g}") if distances else None
    return line | {"consensus": consensus, "diverged": len(runs) - len(distances)}


if __name__ == "__main__":
    main()
