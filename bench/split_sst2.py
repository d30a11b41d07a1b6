"""Compression ratio against test accuracy for every activation codec in edge-cloud split fine-tuning.

Workload: examples/split_sst2.yaml: all-MiniLM-L6-v2 split at layer 3, bottom in ONNX Runtime, LoRA-FA (r=8)
on the top 3 layers, SST-2 train partitioned among 4 label-skewed edge clients, batch 32, AdamW lr 1e-3. Every
setting trains for the same number of steps on the same batches in the same order (one seed), and is then
evaluated on test.tsv (the GLUE dev set, 872 sentences) through the same codec, in batches of 32 like training
(a low-rank codec of fixed rank loses more of a bigger batch).

A setting is a codec (``int8``, ``lowrank-int8:32``) or the SFT bottleneck split and the codec of its codes:
``sft8/int8`` factors layer 3's FFN up-projection at rank 8 (the edge sends 8 values per token; ``sft8r/...``
keeps the residual, so 8 + 384 cross). compression_ratio = fp32 hidden states (384 wide) of each batch padded
only to its longest sentence, divided by the bytes sent (payload plus lengths and labels); ``per_token_ratio``
is SFT's own figure, 384 values per token against what one token's row on the wire costs. The fp32 row is the
uncompressed baseline: its ratio above 1 is what stripping padding alone gives. Each setting runs every seed;
``test_accuracy`` is the mean, ``spread`` max minus min, ``delta_points`` the mean minus fp32's mean.

The bottom is deterministic, so its output for a batch is computed once per bottom and reused.

    python bench/split_sst2.py [--quick] [--steps 300 | --epochs 1] [--codecs fp32,sft8/int8,...] [--seeds 0,1,2]
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import tempfile
from pathlib import Path

import torch

from edge.export import export_bottom
from edge.onnx_bottom import EdgeEncoder
from fedsim.comm.codecs import build_codec
from fedsim.data.sst2 import load_sst2
from fedsim.split.bottleneck import split_halves, wire_width
from fedsim.split.config import SplitConfig, load_split_config
from fedsim.split.model import load_encoder, minilm_path
from fedsim.split.simulate import run_split
from fedsim.split.trainer import CloudTrainer
from fedsim.wire.batch import TokenBatch

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "split_sst2.yaml"
CODECS = (
    "fp32,fp16,int8,lowrank:32,lowrank-int8:16,lowrank-int8:24,lowrank-int8:32,lowrank-int8:48,"
    "lowrank-int4:32,lowrank-int4:48,lowrank-int4:64,tucker:16,32"
)
QUICK_CODECS = "fp32,lowrank-int8:8,sft8/int8"
SFT_CODECS = (  # issue 16's frontier: baselines, today's best low rank, the SFT bottleneck, the shared basis, zstd
    "fp32,int8,lowrank-int8:32,sft4/fp32,sft4/int8,sft8/fp32,sft8/int8,sft16/fp32,sft16/int8,sft32/fp32,sft32/int8,"
    "basis-int8:16,basis-int8:32,basis:16,basis:32,int8+zstd"
)


def per_token_ratio(codec: str, width: int) -> float | None:
    """384 fp32 values against one token's row on the wire (scales included); None for a codec that factors the
    whole batch, which has no per-token cost."""
    if codec.endswith("+zstd"):
        return None  # entropy coding: the cost of a token depends on the batch
    built = build_codec(codec)
    if built.ndim != 2:
        return None
    if codec.startswith("basis"):  # r coefficients (int8: plus a float32 scale); the basis is paid once
        rank = int(codec.split(":")[1])
        return round(384 * 4 / (rank * 4 if codec.startswith("basis:") else rank + 4), 1)
    return round(384 * 4 / built.payload_bytes((1, width)), 1)


def parse_setting(setting: str) -> tuple[dict[str, int | bool] | None, str]:
    """``sft8r/int8`` -> ({rank: 8, residual: True}, "int8"); ``int8`` -> (None, "int8")."""
    head, sep, codec = setting.partition("/")
    if not sep or not head.startswith("sft"):
        return None, setting
    residual = head.endswith("r")
    return {"rank": int(head[3:].rstrip("r")), "residual": residual}, codec


class CachedBottom:
    """The edge encoder with its outputs memoised by batch: every setting sends the same batches."""

    def __init__(self, edge: EdgeEncoder) -> None:
        self.edge = edge
        self.cache: dict[tuple[str, ...], TokenBatch] = {}

    def encode(self, texts: list[str]) -> TokenBatch:
        key = tuple(texts)
        if key not in self.cache:
            self.cache[key] = self.edge.encode(texts)
        return self.cache[key]


def split_codecs(text: str) -> list[str]:
    """``a,b,tucker:8,16`` -> ``[a, b, tucker:8,16]``: a part that is only digits belongs to the previous one."""
    out: list[str] = []
    for part in text.split(","):
        if part.isdigit() and out:
            out[-1] += f",{part}"
        else:
            out.append(part)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--quick", action="store_true", help="60 steps, 4000 train and 300 test sentences")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--epochs", type=float, default=None, help="steps for this many passes over train (SFT: 3)")
    parser.add_argument("--codecs", default=None)
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated; accuracy is the mean over seeds")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sft", action="store_true", help="the SFT frontier: fp32, int8, low rank, sftR/fp32|int8")
    parser.add_argument("--set", action="append", default=[], help="a config override, as fedsim split --set")
    parser.add_argument(
        "--baseline",
        type=float,
        default=None,
        help="fp32's mean accuracy from an earlier run (default: the first setting)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sets = [f"threads={args.threads}", "train.eval_every=0", "train.checkpoint_every=0", "train.eval_batch_size=32"]
    sets += args.set
    if args.quick:
        sets += ["train.steps=60", "data.train_limit=4000", "data.test_limit=300"]
    if args.steps:
        sets.append(f"train.steps={args.steps}")
    base = load_split_config(args.config, sets)
    if args.epochs:  # the clients take turns, so E epochs is E passes' worth of batches over all of them
        train = load_sst2(Path(base.data.dir), "train", base.model.num_labels, base.data.train_limit)
        steps = math.ceil(args.epochs * len(train) / base.train.batch_size)
        base = load_split_config(args.config, [*sets, f"train.steps={steps}"])
    codecs = split_codecs(args.codecs or (QUICK_CODECS if args.quick else SFT_CODECS if args.sft else CODECS))
    seeds = [int(s) for s in args.seeds.split(",")]

    pretrained = load_encoder()
    bottoms: dict[str, CachedBottom] = {}
    baseline: float | None = args.baseline
    with tempfile.TemporaryDirectory() as tmp:
        for setting in codecs:
            bottleneck, codec = parse_setting(setting)
            model = {**base.model.model_dump(), "bottleneck": bottleneck}
            key = json.dumps(bottleneck)
            if key not in bottoms:  # one exported bottom per split
                onnx_path = Path(tmp) / f"bottom-{len(bottoms)}.onnx"
                split = SplitConfig.model_validate({**base.model_dump(), "model": model})
                export_bottom(split_halves(copy.deepcopy(pretrained), split.model)[0], onnx_path)
                bottoms[key] = CachedBottom(EdgeEncoder(onnx_path, minilm_path(), base.model.max_length, args.threads))
            runs = []
            for seed in seeds:
                cfg = SplitConfig.model_validate({**base.model_dump(), "model": model, "codec": codec, "seed": seed})
                trainer = CloudTrainer(cfg, copy.deepcopy(pretrained))
                work = Path(tmp) / f"{setting.replace('/', '-')}-{seed}"
                runs.append(run_split(cfg, work, Path(tmp) / "runs.db", bottoms[key], trainer))
            accuracies = [r["test_accuracy"] for r in runs]
            accuracy = statistics.mean(accuracies)
            if baseline is None:
                baseline = accuracy
            first = runs[0]
            width = wire_width(cfg.model, 384)
            print(
                json.dumps(
                    {
                        "bench": "split_sst2",
                        "setting": setting,
                        "compression_ratio": round(first["compression_ratio"], 2),
                        "compression_ratio_unpadded": round(first["compression_ratio_unpadded"], 2),
                        "per_token_ratio": per_token_ratio(codec, width),
                        "test_accuracy": round(accuracy, 4),
                        "test_accuracy_uncompressed": round(
                            statistics.mean(r["test_accuracy_uncompressed"] for r in runs), 4
                        ),
                        "spread": round(max(accuracies) - min(accuracies), 4),
                        "delta_points": round(100 * (accuracy - baseline), 2),
                        "reconstruction_error": round(first["reconstruction_error"], 4),
                        "bytes_up": first["bytes_up"],
                        "bytes_uncompressed": first["bytes_uncompressed"],
                        "steps": first["steps"],
                        "seeds": seeds,
                        "accuracies": [round(a, 4) for a in accuracies],
                        "wall_s": round(statistics.mean(r["wall_s"] for r in runs), 1),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
