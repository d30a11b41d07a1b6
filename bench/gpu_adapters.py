"""bench/gpu.py's ``adapters`` row: K clients' LoRA adapters trained by the fused executor over one shared frozen
base against the sequential executor (one client at a time over the same base), on one accelerator.

The model is bench/peft_costs.py's classifier at BERT-base's shape, randomly initialised from a config, no
download: hidden 768, 12 layers of 12 heads, FFN 3,072, vocabulary 30,522 (109 M parameters); LoRA r=8, alpha
16 on query and value, the head trained, dropout off. Data: K clients x 16 random sentences of 32 token ids, 2
classes; FedAvg, one local epoch of batches of 8 (2 steps a client), every client every round, the K in one
fused group. A run's first round warms the allocator and the kernels and is not timed; the second is. Each line
is one K (8 and 32): seconds a round of each executor (the medians over the repeats), the median of the
per-repeat ratio ``fused_vs_sequential`` (above 1: fused faster), each executor's device peak memory (CUDA's
``max_memory_allocated``; None on the CPU) and the fused work's share of the accelerator's measured fp32
matmul peak (one client's step counted by torch's FlopCounterMode, times the steps). ``tiny``: hidden 32, 2
layers, vocabulary 1,000, K 2 and 4 (the CPU smoke).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from peft_costs import BATCH, SAMPLES, TINY, build, step_gflop, token_data  # noqa: E402

from fedsim import Simulation  # noqa: E402

BERT_BASE = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12}


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_round(executor: str, clients: int, shape: dict[str, int], accelerator: str) -> tuple[float, float | None]:
    """Wall seconds of the second round under ``executor`` and the device's peak memory (MB; None off CUDA)."""
    device = torch.device(accelerator)
    tree: dict[str, Any] = {
        "name": f"gpu-adapters-{executor}",
        "seed": 0,
        "rounds": 2,
        "clients_per_round": clients,
        "eval_every": 0,
        "progress": False,
        "accelerator": accelerator,
        "data": {"dataset": "random", "clients": clients},  # the dataset is given; this names its size
        "model": {"kind": "logistic"},  # the module is given
        "algorithm": {"kind": "fedavg", "lr": 0.05, "batch_size": BATCH, "local_epochs": 1},
        "executor": {"kind": executor, "clients": clients} if executor == "fused" else {"kind": executor},
    }
    laps: list[float] = []

    def lap(sim: Simulation, result: object) -> None:
        synchronize(device)
        laps.append(time.perf_counter())

    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    with tempfile.TemporaryDirectory(prefix="gpu-adapters-") as scratch:
        out = Path(scratch)
        model, data = build(shape, "lora"), token_data(clients, shape["vocab_size"])
        Simulation(tree, model=model, data=data, callbacks=[lap], out=out / "out", db=out / "r.db").run()
    peak = torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None
    return laps[-1] - laps[0], peak


def adapter_rows(accelerator: str, tiny: bool, repeats: int, peak_gflops: float) -> list[dict[str, Any]]:
    shape = TINY if tiny else BERT_BASE
    sample = token_data(1, shape["vocab_size"]).client(0).x[:BATCH]
    model = build(shape, "lora")
    params = sum(p.numel() for p in model.parameters())
    step = step_gflop(model.to(accelerator), sample.to(accelerator))
    del model
    steps = -(-SAMPLES // BATCH)
    lines = []
    for k in (2, 4) if tiny else (8, 32):
        runs: dict[str, list[tuple[float, float | None]]] = {"sequential": [], "fused": []}
        for _ in range(repeats):
            for executor in runs:
                runs[executor].append(timed_round(executor, k, shape, accelerator))
        seconds = {e: statistics.median(s for s, _ in r) for e, r in runs.items()}
        ratio = statistics.median(s[0] / f[0] for s, f in zip(runs["sequential"], runs["fused"], strict=True))
        memory = {e: r[-1][1] for e, r in runs.items()}
        gflop = k * steps * step
        lines.append(
            {
                "row": "adapters",
                "clients": k,
                "model_params": params,
                "repeats": repeats,
                "sequential_s": round(seconds["sequential"], 4),
                "fused_s": round(seconds["fused"], 4),
                "fused_vs_sequential": round(ratio, 3),
                "sequential_peak_mb": None if memory["sequential"] is None else round(memory["sequential"], 1),
                "fused_peak_mb": None if memory["fused"] is None else round(memory["fused"], 1),
                "gflop": round(gflop, 2),
                "fused_share_of_peak": round(gflop / seconds["fused"] / peak_gflops, 4),
            }
        )
    return lines
