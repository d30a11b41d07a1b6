"""Compression ratio against test accuracy for every activation codec in edge-cloud split fine-tuning.

Workload: examples/split_sst2.yaml: all-MiniLM-L6-v2 split at layer 3, bottom in ONNX Runtime, LoRA-FA (r=8)
on the top 3 layers, SST-2 train partitioned among 4 label-skewed edge clients, batch 32, AdamW lr 1e-3. Every
setting trains for the same number of steps on the same batches in the same order (one seed), and is then
evaluated on test.tsv (the GLUE dev set, 872 sentences) through the same codec, in batches of 32 like training
(a low-rank codec of fixed rank loses more of a bigger batch).

compression_ratio = fp32 hidden states of each batch padded only to its longest sentence, divided by the bytes
sent (payload plus lengths and labels). The fp32 row is the uncompressed baseline: its ratio above 1 is what
stripping padding alone gives. ``delta_points`` is test accuracy minus fp32's, in percentage points.

The bottom is deterministic, so its output for a batch is computed once and reused by every setting.

    python bench/split_sst2.py [--quick] [--steps 300] [--codecs fp32,lowrank-int8:16,...] [--seeds 0]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
from pathlib import Path

import torch

from edge.export import export_bottom
from edge.onnx_bottom import EdgeEncoder
from fedsim.split.config import SplitConfig, load_split_config
from fedsim.split.model import load_encoder, minilm_path, split_encoder
from fedsim.split.simulate import run_split
from fedsim.split.trainer import CloudTrainer
from fedsim.wire.batch import TokenBatch

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "examples" / "split_sst2.yaml"
CODECS = (
    "fp32,fp16,int8,lowrank:32,lowrank-int8:16,lowrank-int8:24,lowrank-int8:32,lowrank-int8:48,"
    "lowrank-int4:32,lowrank-int4:48,lowrank-int4:64,tucker:16,32"
)
QUICK_CODECS = "fp32,lowrank-int8:8,lowrank-int8:16"


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
    parser.add_argument("--codecs", default=None)
    parser.add_argument("--seeds", default="0", help="comma-separated; accuracy is the median over seeds")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sets = [f"threads={args.threads}", "train.eval_every=0", "train.checkpoint_every=0", "train.eval_batch_size=32"]
    if args.quick:
        sets += ["train.steps=60", "data.train_limit=4000", "data.test_limit=300"]
    if args.steps:
        sets.append(f"train.steps={args.steps}")
    base = load_split_config(args.config, sets)
    codecs = split_codecs(args.codecs or (QUICK_CODECS if args.quick else CODECS))
    seeds = [int(s) for s in args.seeds.split(",")]

    pretrained = load_encoder()
    bottom_model, _ = split_encoder(copy.deepcopy(pretrained), base.model.split_layer, base.model.num_labels)
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = Path(tmp) / "bottom.onnx"
        export_bottom(bottom_model, onnx_path)
        bottom = CachedBottom(EdgeEncoder(onnx_path, minilm_path(), base.model.max_length, args.threads))
        baseline: float | None = None
        for codec in codecs:
            runs = []
            for seed in seeds:
                cfg = SplitConfig.model_validate({**base.model_dump(), "codec": codec, "seed": seed})
                trainer = CloudTrainer(cfg, copy.deepcopy(pretrained))
                work = Path(tmp) / f"{codec}-{seed}"
                runs.append(run_split(cfg, work, Path(tmp) / "runs.db", bottom, trainer))
            accuracy = statistics.median(r["test_accuracy"] for r in runs)
            if baseline is None:
                baseline = accuracy
            first = runs[0]
            print(
                json.dumps(
                    {
                        "bench": "split_sst2",
                        "codec": codec,
                        "compression_ratio": round(first["compression_ratio"], 2),
                        "test_accuracy": round(accuracy, 4),
                        "delta_points": round(100 * (accuracy - baseline), 2),
                        "reconstruction_error": round(first["reconstruction_error"], 4),
                        "bytes_up": first["bytes_up"],
                        "bytes_uncompressed": first["bytes_uncompressed"],
                        "steps": first["steps"],
                        "seeds": seeds,
                        "accuracies": [round(r["test_accuracy"], 4) for r in runs],
                        "wall_s": round(statistics.median(r["wall_s"] for r in runs), 1),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
