"""bench/gpu.py's split row and the checks only a GPU can make.

``split``: the cloud step of split fine-tuning (decode a batch on the host, train the top 3 layers of an
all-MiniLM-L6-v2-shaped encoder with LoRA-FA adapters on the accelerator: :class:`~fedsim.split.trainer.
CloudTrainer.train_step`, what ``fedsim serve`` runs per message), in real tokens a second, with the hidden
states of the split (384 values a token) and with the SFT bottleneck (rank 8: 8 values a token, the
up-projection on the cloud). The encoder is built from MiniLM's configuration with seeded random weights
(speed does not depend on the weights, and the GPU machine need not carry the 90 MB checkpoint); batches are
32 sentences of 8 to 64 tokens, SST-2's range, as fp32 on the wire. The first steps warm up and are not timed.

``checks`` (each line says ``ok`` and the figure it rests on):

- ``resume``: a SCAFFOLD run on the disk state store with checkpoints, stopped after round 2 and resumed,
  ends on the uninterrupted run's weights, bit for bit.
- ``fused_equals_sequential``: FedAvg on an MLP, fused in groups of 3 against one client at a time: the
  largest difference of the final weights, within the tests' 2e-5 (float32 re-association).
- ``host_reads``: the host's reads of tensors in a steady round (each one a wait for the GPU) counted at
  cohorts of 2, 8 and 16, sequential and fused: the same count at every cohort, at most 8.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedsim.api.launch import final_weights
from fedsim.comm.codecs import build_codec
from fedsim.config import parse_config
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.runtime.host_reads import HostReads
from fedsim.split.config import SplitConfig
from fedsim.split.trainer import CloudTrainer
from fedsim.wire.batch import TokenBatch, encode_batch

MINILM = {  # all-MiniLM-L6-v2's config.json, the fields that shape the computation
    "vocab_size": 30522,
    "hidden_size": 384,
    "num_hidden_layers": 6,
    "num_attention_heads": 12,
    "intermediate_size": 1536,
    "max_position_embeddings": 512,
}
ATOL = 2e-5  # tests/sim/test_fused.py's bound for the MLP


def _batches(width: int, count: int, seed: int) -> list[Any]:
    rng = np.random.default_rng(seed)
    codec, out = build_codec("fp32"), []
    for _ in range(count):
        lengths = rng.integers(8, 65, size=32)
        tokens = rng.standard_normal((int(lengths.sum()), width)).astype(np.float32)
        out.append(encode_batch(codec, TokenBatch(tokens, lengths), rng.integers(0, 2, size=32)))
    return out


def split_rows(accelerator: str, tiny: bool) -> list[dict[str, Any]]:
    from transformers import BertConfig, BertModel

    steps, warm = (3, 1) if tiny else (60, 10)
    lines = []
    with tempfile.TemporaryDirectory(prefix="gpu-split-") as scratch:
        config = BertConfig(**MINILM, attn_implementation="eager")
        config.save_pretrained(scratch)  # the trainer names its base model by this directory
        for bottleneck in (None, {"rank": 8}):
            torch.manual_seed(0)
            encoder = BertModel(config).eval()
            cfg = SplitConfig.model_validate(
                {
                    "accelerator": accelerator,
                    "model": {"path": scratch, "split_layer": 3, "bottleneck": bottleneck},
                    "train": {"batch_size": 32},
                }
            )
            trainer = CloudTrainer(cfg, encoder)
            batches = _batches(trainer.wire_width, warm + steps, seed=0)
            for batch in batches[:warm]:
                trainer.train_step(batch)
            t0 = time.perf_counter()
            for batch in batches[warm:]:
                trainer.train_step(batch)  # reads the loss: each step ends on the host
            seconds = time.perf_counter() - t0
            tokens = sum(int(np.sum(b.lengths)) for b in batches[warm:])
            lines.append(
                {
                    "row": "split",
                    "bottleneck": "sft8" if bottleneck else "off",
                    "wire_width": trainer.wire_width,
                    "steps": steps,
                    "tokens": tokens,
                    "tokens_per_s": round(tokens / seconds, 1),
                    "step_ms": round(1000 * seconds / steps, 2),
                }
            )
    return lines


def _tree(accelerator: str, **extra: Any) -> dict[str, Any]:
    tree = {
        "name": "gpu-check",
        "seed": 0,
        "rounds": 5,
        "clients_per_round": 6,
        "eval_every": 0,
        "progress": False,
        "accelerator": accelerator,
        "data": {"dataset": "random", "clients": 16, "samples_per_client": 24, "features": 20, "classes": 4},
        "model": {"kind": "mlp", "hidden": [32]},
        "algorithm": {"kind": "fedavg", "lr": 0.05, "batch_size": 8, "local_epochs": 2},
    }
    return {**tree, **extra}


def _engine(tree: dict[str, Any], out: Path, resume: bool = False) -> Engine:
    return Engine(parse_config(tree), out_dir=out, db_path=out / "runs.db", resume=resume)


def resume_check(accelerator: str, tmp: Path) -> dict[str, Any]:
    algorithm = {"kind": "scaffold", "lr": 0.05, "batch_size": 8, "local_epochs": 2}
    tree = _tree(accelerator, algorithm=algorithm, state={"backend": "disk"}, checkpoint={"every": 2})
    _engine(tree, tmp / "whole").run()
    _engine(tree, tmp / "cut").run(after_round=lambda row: row.round == 2)
    _engine(tree, tmp / "cut", resume=True).run()
    whole, cut = final_weights(tmp / "whole"), final_weights(tmp / "cut")
    different = int((whole != cut).sum())
    return {"row": "check", "check": "resume", "ok": different == 0, "values_differing": different}


def fused_check(accelerator: str, tmp: Path) -> dict[str, Any]:
    finals = []
    for executor in ({"kind": "sequential"}, {"kind": "fused", "clients": 3}):
        out = tmp / executor["kind"]
        engine = _engine(_tree(accelerator, executor=executor), out)
        engine.run()
        finals.append(engine.global_state.cpu())
    gap = float((finals[0] - finals[1]).abs().max())
    return {"row": "check", "check": "fused_equals_sequential", "ok": gap <= ATOL, "max_abs_diff": gap, "atol": ATOL}


def host_reads_check(accelerator: str, tmp: Path) -> dict[str, Any]:
    counts: dict[str, list[int]] = {}
    for executor in ({"kind": "sequential"}, {"kind": "fused", "clients": 4}):
        reads = []
        for cohort in (2, 8, 16):
            tree = _tree(accelerator, executor=executor, clients_per_round=cohort)
            engine = _engine(tree, tmp / f"reads-{executor['kind']}-{cohort}")
            engine.round(0)  # lazily built state first; then a steady round
            with HostReads() as mode:
                engine.round(1)
            engine.close()
            reads.append(mode.total)
        counts[executor["kind"]] = reads
    ok = all(len(set(r)) == 1 and r[0] <= 8 for r in counts.values())
    return {"row": "check", "check": "host_reads", "ok": ok, "reads_per_round": counts, "cohorts": [2, 8, 16]}


def check_rows(accelerator: str, tiny: bool) -> list[dict[str, Any]]:
    lines = []
    for check in (resume_check, fused_check, host_reads_check):
        with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
            t0 = time.perf_counter()
            line = check(accelerator, Path(scratch))
            lines.append({**line, "seconds": round(time.perf_counter() - t0, 2)})
    return lines
