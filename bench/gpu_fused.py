"""bench/gpu.py's training rows: the fused executor against the sequential one and the plainest torch loop on
four workloads, and a round's cost at two populations, all on one accelerator.

Workloads (``--tiny``: a few clients of each, for the CPU smoke):

- ``w1``: bench/fused.py's W1, 1,000 clients x 64 random samples of 784 features, MLP 784-128-10, one local
  epoch of batch 16 (4 steps a client), every client every round; groups of 50 and 250.
- ``w2``: bench/fused.py's W2, the quickstart's GroupNorm CNN on 8x8 images, 1,000 clients x 16 samples, two
  local epochs of batch 16 (2 steps), every client every round; groups of 50 and 250.
- ``cifar10``: pfl's ``simple_cnn`` on its CIFAR10 shape (bench/pfl_shapes.py; dropout included), 250 of
  1,000 users a round, 50 images each in batches of 10 (5 steps); groups of 50 and 250.
- ``stackoverflow``: pfl's next-word transformer (dropout 0.1, a 10,004-word output), 100 of 1,000 users a
  round, 64 sentences of 20 tokens in batches of 16 (4 steps); groups of 20 and 100.

FedAvg with plain local SGD in every case. Each repeat times, one after another in this process: ``limit_s``,
the same number of SGD steps of the same model and batch in a plain ``torch.optim.SGD`` loop over one client's
data; ``sequential_s``, the rounds with ``executor.kind: sequential``; ``fused_s``, with ``executor.kind:
fused`` at each group size. A run's first round warms the allocator and the kernels (cuDNN's choice, the
GPU's clocks) and is not timed; the second is. Each line is one (workload, group): the medians over
the repeats and the medians of the per-repeat ratios ``fused_vs_limit`` and ``sequential_vs_limit`` (above 1:
faster than the plain loop), with the work (fedsim's FLOP count of a step times the steps) as a share of the
accelerator's measured fp32 matmul peak.
"""

from __future__ import annotations

import itertools
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from pfl_shapes import MODELS, SHAPES, synthetic, tiny_shape  # noqa: E402
from sim_throughput import w1_config  # noqa: E402

from fedsim import Simulation  # noqa: E402
from fedsim.config import parse_config  # noqa: E402
from fedsim.data.base import ArrayDataset, ClientData, FederatedDataset  # noqa: E402
from fedsim.data.build import build_dataset  # noqa: E402
from fedsim.models import build_model  # noqa: E402
from fedsim.sim.executors.threads import step_flops  # noqa: E402


@dataclass(frozen=True)
class Workload:
    """One row's federation: ``cohort`` of ``clients`` a round, ``steps`` local steps of ``batch`` at ``lr``
    each, ``groups`` the fused group sizes; ``tokens``: next-token prediction (the loss over every position)."""

    name: str
    clients: int
    cohort: int
    steps: int
    batch: int
    lr: float
    epochs: int
    groups: tuple[int, int]
    tokens: bool
    dataset: Callable[[], FederatedDataset]
    model: Callable[[FederatedDataset], nn.Module]


def _zoo(name: str, clients: int, samples: int, epochs: int, groups: tuple[int, int]) -> Workload:
    """W1 or W2: the random data set of bench/fused.py's workload and a model of fedsim's zoo."""
    spec = {
        "w1": ({"samples_per_client": samples, "features": 784}, {"kind": "mlp", "hidden": [128]}),
        "w2": (
            {"samples_per_client": samples, "features": 64},
            {"kind": "cnn", "norm": "group", "groups": 4, "channels": [16, 32]},
        ),
    }[name]
    data = {"dataset": "random", "clients": clients, "classes": 10, "test_samples": 16, **spec[0]}
    cfg = parse_config({**w1_config(clients, 1), "data": data, "model": spec[1]})
    return Workload(
        name,
        clients,
        clients,
        epochs * -(-samples // 16),
        16,
        0.05,
        epochs,
        groups,
        False,
        lambda: build_dataset(cfg.data, 0),
        lambda ds: build_model(cfg.model, ds.input_shape, ds.num_classes, 0),
    )


def _pfl(name: str, cohort: int, groups: tuple[int, int], small: bool) -> Workload:
    """pfl's shape ``name`` (bench/pfl_shapes.py): its synthetic data as an array data set, its model."""
    shape = tiny_shape(SHAPES[name]) if small else SHAPES[name]

    def dataset() -> FederatedDataset:
        x, y = synthetic(shape)
        parts = [np.arange(*shape.user_rows(u)) for u in range(shape.users)]
        test = ClientData(torch.from_numpy(x[:4]), torch.from_numpy(y[:4]))
        return ArrayDataset(x, y, parts, test, num_classes=shape.classes)

    steps = shape.epochs * -(-shape.per_user // shape.batch)
    return Workload(
        name,
        shape.users,
        cohort,
        steps,
        shape.batch,
        shape.local_lr,
        shape.epochs,
        groups,
        shape.tokens,
        dataset,
        lambda ds: MODELS[name](shape),
    )


def workloads(tiny: bool) -> list[Workload]:
    if tiny:
        return [
            _zoo("w1", 8, 32, 1, (2, 4)),
            _zoo("w2", 8, 16, 2, (2, 4)),
            _pfl("cifar10", 4, (2, 4), small=True),
            _pfl("stackoverflow", 4, (2, 4), small=True),
        ]
    return [
        _zoo("w1", 1000, 64, 1, (50, 250)),
        _zoo("w2", 1000, 16, 2, (50, 250)),
        _pfl("cifar10", 250, (50, 250), small=False),
        _pfl("stackoverflow", 100, (20, 100), small=False),
    ]


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def loss_of(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over every output row: (batch, classes), or (batch, length, vocabulary) for next words."""
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1).long())


def plain_loop(work: Workload, dataset: FederatedDataset, steps: int, device: torch.device) -> float:
    """Seconds for ``steps`` SGD steps of the workload's model over one client's data in the plainest loop."""
    model = work.model(dataset).to(device).train()
    opt = torch.optim.SGD(model.parameters(), lr=work.lr)
    data = dataset.client(0)
    x, y = data.x.to(device), data.y.to(device)
    per_epoch = -(-len(x) // work.batch)
    for warm in range(2):  # the kernels' first calls (cuDNN's choice) are not the loop's
        opt.zero_grad()
        loss_of(model(x[warm : warm + work.batch]), y[warm : warm + work.batch]).backward()
    synchronize(device)
    t0 = time.perf_counter()
    for step in range(steps):
        lo = (step % per_epoch) * work.batch
        opt.zero_grad()
        loss_of(model(x[lo : lo + work.batch]), y[lo : lo + work.batch]).backward()
        opt.step()
    synchronize(device)
    return time.perf_counter() - t0


def simulate(
    work: Workload, dataset: FederatedDataset, executor: dict[str, Any], rounds: int, accelerator: str, tmp: Path
) -> float:
    """Wall seconds of ``rounds`` rounds after a first, untimed one."""
    tree: dict[str, Any] = {
        "name": f"gpu-{work.name}",
        "seed": 0,
        "rounds": rounds + 1,
        "clients_per_round": work.cohort,
        "eval_every": 0,
        "progress": False,
        "accelerator": accelerator,
        "executor": executor,
        "task": {"kind": "language_model" if work.tokens else "classification"},
        "algorithm": {"kind": "fedavg", "lr": work.lr, "local_epochs": work.epochs, "batch_size": work.batch},
    }
    laps: list[float] = []
    device = torch.device(accelerator)

    def lap(sim: Simulation, result: object) -> None:
        synchronize(device)
        laps.append(time.perf_counter())

    kind = executor["kind"] + str(executor.get("clients", ""))
    sim = Simulation(tree, model=work.model(dataset), data=dataset, callbacks=[lap], out=tmp / kind, db=tmp / "r.db")
    sim.run()
    return laps[-1] - laps[0]


def fused_rows(accelerator: str, tiny: bool, repeats: int, peak_gflops: float) -> list[dict[str, Any]]:
    device, rounds = torch.device(accelerator), 1  # a timed round of 400 to 4,000 steps after the untimed one
    lines = []
    for work in workloads(tiny):
        dataset = work.dataset()
        steps = rounds * work.cohort * work.steps
        sample = dataset.client(0).x[:1]
        flops = step_flops(work.model(dataset), sample, work.batch) or 0.0
        times: dict[str, list[float]] = {"limit": [], "sequential": [], **{f"fused{g}": [] for g in work.groups}}
        for _ in range(repeats):
            with tempfile.TemporaryDirectory(prefix="gpu-fused-") as scratch:
                tmp = Path(scratch)
                times["sequential"].append(simulate(work, dataset, {"kind": "sequential"}, rounds, accelerator, tmp))
                for g in work.groups:
                    fused = {"kind": "fused", "clients": g}
                    times[f"fused{g}"].append(simulate(work, dataset, fused, rounds, accelerator, tmp))
            times["limit"].append(plain_loop(work, dataset, steps, device))

        def ratio(num: str, den: str, times: dict[str, list[float]] = times) -> float:
            return round(statistics.median(a / b for a, b in zip(times[num], times[den], strict=True)), 3)

        gflop = steps * flops / 1e9
        for g in work.groups:
            fused_s = statistics.median(times[f"fused{g}"])
            lines.append(
                {
                    "row": "fused",
                    "workload": work.name,
                    "group": g,
                    "clients": work.clients,
                    "cohort": work.cohort,
                    "rounds": rounds,
                    "steps": steps,
                    "repeats": repeats,
                    "limit_s": round(statistics.median(times["limit"]), 4),
                    "sequential_s": round(statistics.median(times["sequential"]), 4),
                    "fused_s": round(fused_s, 4),
                    "fused_vs_limit": ratio("limit", f"fused{g}"),
                    "sequential_vs_limit": ratio("limit", "sequential"),
                    "fused_vs_sequential": ratio("sequential", f"fused{g}"),
                    "gflop": round(gflop, 2),
                    "fused_share_of_peak": round(gflop / fused_s / peak_gflops, 4),
                    "limit_share_of_peak": round(gflop / statistics.median(times["limit"]) / peak_gflops, 4),
                }
            )
    return lines


def population_rows(accelerator: str, tiny: bool, rounds: int) -> list[dict[str, Any]]:
    """The same cohort drawn from two populations of lazily generated W1 clients (generated on the host from
    (seed, client) when they train, then copied to the accelerator): seconds a round after one untimed round,
    and the accelerator's peak memory (what stays resident on the GPU should not grow with the population)."""
    populations, cohort = ((100, 10_000), 10) if tiny else ((1000, 1_000_000), 100)
    device, lines, base = torch.device(accelerator), [], None
    for population in populations:
        tree = {**w1_config(population, rounds + 1, lazy=True), "clients_per_round": cohort}
        tree = {**tree, "accelerator": accelerator, "threads": None, "name": f"gpu-population-{population}"}
        laps: list[float] = []

        def lap(sim: Simulation, result: object) -> None:
            synchronize(device)
            laps.append(time.perf_counter())  # noqa: B023  (each population's own list, used in its loop)

        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        with tempfile.TemporaryDirectory(prefix="gpu-population-") as scratch:
            Simulation(tree, callbacks=[lap], out=Path(scratch) / "out", db=Path(scratch) / "r.db").run()
        round_s = statistics.median(b - a for a, b in itertools.pairwise(laps))
        peak_mb = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
        base = base or (round_s, peak_mb)
        lines.append(
            {
                "row": "population",
                "population": population,
                "cohort": cohort,
                "rounds": rounds,
                "round_s": round(round_s, 4),
                "round_ratio": round(round_s / base[0], 3),
                "device_peak_mb": None if peak_mb is None else round(peak_mb, 1),
                "device_peak_ratio": None if peak_mb is None or not base[1] else round(peak_mb / base[1], 3),
            }
        )
    return lines
