"""What a harder-compressed uplink costs: bytes against accuracy for each uplink compressor, 3 seeds each.

Two workloads. ``quickstart``: examples/quickstart.yaml as it is (100 digits clients, Dirichlet 0.5, the
GroupNorm CNN, 50 clients a round, 40 rounds). ``mnist``: 100 clients with Dirichlet(0.5) splits of MNIST's
60,000 training images, 20 clients a round, 1 local epoch of batch 16 at lr 0.05, ``--rounds`` rounds, and a
small CNN: the GroupNorm CNN's two conv blocks (16 and 32 channels) and a 128-unit hidden layer before the
classifier (207,018 parameters; the quickstart model has no hidden layer, so its largest matrix is 10 x 128).
Settings: dense FedAvg, top-k (1%), EF-sign, 1-bit momentum (5 warm-up rounds), QSGD with s = 2, 4 and 8
levels (bucket 512; s = 4 also Elias-coded), PowerSGD of rank 1, 2 and 4 (and of rank 2 and 3 with float16
factors and 2 or 3 power iterations), ACP-SGD of rank 1, 2 and 4, and CRAIG coresets of 30% of each
client's data (chosen again every 5 of its turns) with a dense uplink, against its baseline, a stratified uniform
30% (random_30%), both also in
batches of 4 (``_b4``: about the full data's number of steps, each cheaper); ``_b8`` (batches of 8) runs only
when named. Each line: the
workload, the setting, the mean uplink bytes of a run, the ratio of dense FedAvg's uplink to it, the mean final
accuracy over the seeds, each seed's, the mean change against dense FedAvg with the same seeds (in points),
and the client compute against dense FedAvg's, both as the seconds clients spent training (the coreset's choice
included) and as their arithmetic (``client_gflop``: FLOPs of every trained sample's step, and of the forward
passes CRAIG's choices ran, counted as the run makes them). Needs ../shared/data/mnist for the mnist workload (or
``--dir``).

    python bench/compressors.py [--workloads quickstart mnist] [--seeds 0 1 2] [--rounds 20] [--threads 1]
        [--clients-per-round 100]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch.nn.functional as F
from mnist_tree import mnist_tree
from torch import Tensor, nn
from torch.utils.flop_counter import FlopCounterMode

from fedsim import Simulation
from fedsim.api import global_model
from fedsim.config import load_tree
from fedsim.data import craig
from fedsim.data.base import ClientData
from fedsim.models import cnn
from fedsim.sim.rounds import coreset
from fedsim.sim.rounds.summary import strict

ROOT = Path(__file__).resolve().parent.parent


def onebit_lamb(warmup: int) -> dict[str, Any]:
    """1-bit LAMB: the onebit uplink on the clients and its server half, both warming up for ``warmup`` rounds."""
    return {
        "uplink": {"kind": "onebit", "warmup": warmup},
        "server_optimizer": {"kind": "onebit_lamb", "warmup": warmup},
    }


SETTINGS: dict[str, dict[str, Any]] = {  # config sections a setting adds to the workload
    "dense": {},
    "topk_1%": {"uplink": {"kind": "topk", "fraction": 0.01}},
    "ef_sign": {"uplink": {"kind": "ef_sign"}},
    "onebit": {"uplink": {"kind": "onebit", "warmup": 5}},
    "qsgd_s2": {"uplink": {"kind": "qsgd", "levels": 2}},
    "qsgd_s4": {"uplink": {"kind": "qsgd", "levels": 4}},
    "qsgd_s4_elias": {"uplink": {"kind": "qsgd", "levels": 4, "elias": True}},
    "qsgd_s8": {"uplink": {"kind": "qsgd", "levels": 8}},
    "powersgd_r1": {"uplink": {"kind": "powersgd", "rank": 1}},
    "powersgd_r2": {"uplink": {"kind": "powersgd", "rank": 2}},
    "powersgd_r4": {"uplink": {"kind": "powersgd", "rank": 4}},
    "acpsgd_r1": {"uplink": {"kind": "acpsgd", "rank": 1}},
    "acpsgd_r2": {"uplink": {"kind": "acpsgd", "rank": 2}},
    "acpsgd_r4": {"uplink": {"kind": "acpsgd", "rank": 4}},
    # 1-bit LAMB against LAMB itself: the same server half, never leaving its warm-up (every message dense)
    "lamb": onebit_lamb(1_000_000),
    "onebit_lamb": onebit_lamb(10),
    "onebit_lamb_w20": onebit_lamb(20),
    # float16 factors (torch's fp16 wrapper) and more power iterations: a client's warm start is as old as its
    # last turn, rounds ago, where the paper's is one step old
    "powersgd_r2_half_it2": {"uplink": {"kind": "powersgd", "rank": 2, "half": True, "iterations": 2}},
    "powersgd_r3_half_it2": {"uplink": {"kind": "powersgd", "rank": 3, "half": True, "iterations": 2}},
    "powersgd_r3_half_it3": {"uplink": {"kind": "powersgd", "rank": 3, "half": True, "iterations": 3}},
}
# CRAIG's 30% and its baseline, a stratified uniform 30%: in the workload's batches of 16; in batches of 4, about
# as many steps as the full data (a batch's weighted mean loss stands for a full batch's), each cheaper; and in
# batches of 8, 0.6x the full data's steps, each 0.7x as dear as a step of 16 on a CPU (run only when named)
for _kind in ("craig", "random"):
    for _batch in (None, 4, 8):
        _setting: dict[str, Any] = {"coreset": {"kind": _kind, "fraction": 0.3, "every": 5}}
        if _batch is not None:
            _setting["algorithm"] = {"batch_size": _batch}
        SETTINGS[f"{_kind}_30%" + (f"_b{_batch}" if _batch else "")] = _setting
DEFAULT = [name for name in SETTINGS if not name.endswith("_b8")]  # the table; the rest only when named
Run = tuple[float, int, float, float, float]  # final accuracy, uplink bytes, client seconds, wall seconds, GFLOP


def small_cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The zoo's GroupNorm CNN with a 128-unit hidden layer before its classifier."""
    body = cnn(input_shape, num_classes)
    classifier = body[-1]
    assert isinstance(classifier, nn.Linear)
    return nn.Sequential(
        *list(body)[:-1], nn.Linear(classifier.in_features, 128), nn.ReLU(), nn.Linear(128, num_classes)
    )


def workload(name: str, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    cohort = {} if args.clients_per_round is None else {"clients_per_round": args.clients_per_round}
    if name == "quickstart":
        tree = load_tree(ROOT / "examples" / "quickstart.yaml", [])
        return {**tree, "seed": seed, "threads": args.threads, "progress": False, "eval_every": 0, **cohort}
    tree = mnist_tree("compressors-mnist", args.dir, 100, 0.5, 20, args.rounds, args.threads)
    return {**{k: v for k, v in tree.items() if k != "model"}, "seed": seed, **cohort}  # the model: small_cnn


def base_cohort(name: str, args: argparse.Namespace) -> int:
    """The clients a round of ``name`` trains under ``args``."""
    return int(workload(name, args, 0)["clients_per_round"])


def run(name: str, args: argparse.Namespace, seed: int, setting: dict[str, Any]) -> Run:
    with tempfile.TemporaryDirectory() as tmp, counted_choices() as chosen:
        base = workload(name, args, seed)
        tree = {**base, **setting}  # a setting's sections replace the workload's; its algorithm fields override
        tree["algorithm"] = {**base["algorithm"], **setting.get("algorithm", {})}
        model = small_cnn if name == "mnist" else None
        t0 = time.perf_counter()
        sim = Simulation(tree, model=model, out=Path(tmp) / "out", db=Path(tmp) / "runs.db")
        summary = sim.run()
        wall = time.perf_counter() - t0
        per_step, per_forward = flops_per_sample(sim)
        gflop = (summary.samples * per_step + chosen[0] * per_forward + chosen[1]) / 1e9
        return summary.final_accuracy, summary.bytes_up, summary.train_s, wall, gflop


@contextlib.contextmanager
def counted_choices() -> Iterator[list[int]]:
    """Counts, as the run makes them, the samples CRAIG's choices run their forward pass over and the greedy's
    arithmetic (:func:`greedy_ops`): ``[samples, operations]``."""
    chosen = [0, 0]
    forward, greedy = coreset.last_layer_gradients, craig.facility_location

    def counting(module: nn.Module, data: ClientData) -> Tensor:
        chosen[0] += data.n_samples
        return forward(module, data)

    def counting_greedy(features: Tensor, k: int) -> tuple[Tensor, Tensor]:
        chosen[1] += greedy_ops(features.shape[0], features.shape[1], k)
        return greedy(features, k)

    coreset.last_layer_gradients, craig.facility_location = counting, counting_greedy
    try:
        yield chosen
    finally:
        coreset.last_layer_gradients, craig.facility_location = forward, greedy


def greedy_ops(n: int, d: int, k: int) -> int:
    """The arithmetic of :func:`fedsim.data.craig.facility_location` on ``n`` samples of ``d`` features, one
    operation an element an op: the distances (a difference, square and sum per feature of each pair, a root)
    and the similarity (``3 n^2 d + 3 n^2``); then each of the ``min(k, n)`` greedy steps' subtract, clamp and
    column sum over the n x n similarities and its running maximum (``3 n^2 + 2 n``); then each sample's most
    similar chosen one (``n k``)."""
    steps = min(k, n)
    return 3 * n * n * d + 3 * n * n + steps * (3 * n * n + 2 * n) + n * steps


def flops_per_sample(sim: Simulation) -> tuple[float, float]:
    """A training step's FLOPs per sample (forward and backward) and a forward pass's, counted by torch's
    FlopCounterMode on the run's own model and a batch of its first client's samples."""
    module, data = global_model(sim.engine), sim.engine.dataset.client(0)
    x, y = data.x[:16], data.y[:16]
    with FlopCounterMode(display=False) as forward:
        logits = module(x)
    with FlopCounterMode(display=False) as backward:
        F.cross_entropy(logits, y).backward()
    per_forward = forward.get_total_flops() / len(x)
    return per_forward + backward.get_total_flops() / len(x), per_forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=ROOT.parent / "shared" / "data" / "mnist")
    parser.add_argument("--workloads", nargs="+", default=["quickstart", "mnist"], choices=["quickstart", "mnist"])
    parser.add_argument("--settings", nargs="+", default=DEFAULT, choices=list(SETTINGS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=20, help="mnist's rounds (the quickstart keeps its 40)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--clients-per-round", type=int, default=None, help="the cohort (default: the workload's; 100 is all of them)"
    )
    args = parser.parse_args()
    for name in args.workloads:
        dense: list[Run] = [run(name, args, seed, SETTINGS["dense"]) for seed in args.seeds]
        for setting in args.settings:
            runs = dense if setting == "dense" else [run(name, args, s, SETTINGS[setting]) for s in args.seeds]
            up = statistics.mean(r[1] for r in runs)
            line = {
                "bench": "compressors",
                "workload": name,
                "setting": setting,
                "config": SETTINGS[setting],
                "seeds": args.seeds,
                "clients_per_round": base_cohort(name, args),
                "bytes_up": round(up),
                "ratio_vs_dense": round(statistics.mean(r[1] for r in dense) / up, 2),
                "final_accuracy": round(statistics.mean(r[0] for r in runs), 4),
                "accuracies": [round(r[0], 4) for r in runs],
                "delta_points": round(100 * statistics.mean(r[0] - d[0] for r, d in zip(runs, dense, strict=True)), 2),
                "client_s": round(statistics.mean(r[2] for r in runs), 2),
                "client_compute_vs_dense": round(
                    statistics.mean(r[2] for r in runs) / statistics.mean(r[2] for r in dense), 3
                ),
                "wall_s": round(statistics.mean(r[3] for r in runs), 1),
                "client_gflop": round(statistics.mean(r[4] for r in runs), 1),
                "client_flops_vs_dense": round(
                    statistics.mean(r[4] for r in runs) / statistics.mean(r[4] for r in dense), 3
                ),
            }
            print(json.dumps(strict(line)), flush=True)


if __name__ == "__main__":
    main()
