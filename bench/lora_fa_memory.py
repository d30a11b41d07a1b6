"""Activation memory, trainable parameters and accuracy of LoRA-FA against LoRA and full fine-tuning.

Workload: examples/split_sst2.yaml with the fp32 codec (no compression): the same top (3 layers of
all-MiniLM-L6-v2 and a linear head over mean pooling), the same batches in the same order, the same number of
steps. Adapters r=8, alpha=16 on query, key, value, attention output and both FFN linears; LoRA-FA freezes A.

``saved_mb`` is what autograd keeps for backward (saved-tensor hooks, parameters excluded, each storage once) on
one probe batch of 32 sentences x 64 tokens; ``peak_saved_mb`` is the largest over the training steps.
``ratio_vs_lora`` divides by LoRA's figure; ``delta_points`` is test accuracy minus LoRA's.

    python bench/lora_fa_memory.py [--quick] [--steps 300] [--full-lr 1e-4]
"""

from __future__ import annotations

import argparse
import copy
import json
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from split_sst2 import CONFIG, CachedBottom

from edge.export import export_bottom
from edge.onnx_bottom import EdgeEncoder
from fedsim.split.config import SplitConfig, load_split_config
from fedsim.split.model import load_encoder, minilm_path, split_encoder
from fedsim.split.simulate import run_split
from fedsim.split.trainer import CloudTrainer

MODES = ("lora", "lora_fa", "full")


def probe_saved_bytes(trainer: CloudTrainer, batch: int = 32, tokens: int = 64) -> int:
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(batch, tokens, trainer.wire_width, generator=generator)
    mask = torch.ones(batch, tokens, dtype=torch.long)
    labels = torch.arange(batch) % 2
    trainer.top.train()
    with torch.random.fork_rng(devices=[]), trainer.meter.measure():  # dropout here must not shift training's RNG
        loss = F.cross_entropy(trainer.top(hidden, mask), labels)
    del loss
    saved = trainer.meter.bytes
    trainer.meter.peak = 0  # peak_saved_mb is then training's own
    return saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument("--quick", action="store_true", help="60 steps, 4000 train and 300 test sentences")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--full-lr", type=float, default=1e-4, help="full fine-tuning's learning rate")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sets = ["codec=fp32", f"threads={args.threads}", "train.eval_every=0", "train.checkpoint_every=0"]
    if args.quick:
        sets += ["train.steps=60", "data.train_limit=4000", "data.test_limit=300"]
    if args.steps:
        sets.append(f"train.steps={args.steps}")
    base = load_split_config(args.config, sets)

    pretrained = load_encoder()
    bottom_model, _ = split_encoder(copy.deepcopy(pretrained), base.model.split_layer, base.model.num_labels)
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = Path(tmp) / "bottom.onnx"
        export_bottom(bottom_model, onnx_path)
        bottom = CachedBottom(EdgeEncoder(onnx_path, minilm_path(), base.model.max_length, args.threads))
        for mode in MODES:
            tree = base.model_dump()
            tree["adapter"]["mode"] = mode
            if mode == "full":
                tree["train"]["lr"] = args.full_lr
            cfg = SplitConfig.model_validate(tree)
            trainer = CloudTrainer(cfg, copy.deepcopy(pretrained))
            probe = probe_saved_bytes(trainer)
            summary = run_split(cfg, Path(tmp) / mode, Path(tmp) / "runs.db", bottom, trainer)
            results[mode] = {"saved": probe, "accuracy": summary["test_accuracy"]}
            lora = results.get("lora", results[mode])
            print(
                json.dumps(
                    {
                        "bench": "lora_fa_memory",
                        "mode": mode,
                        "saved_mb": round(probe / 2**20, 2),
                        "ratio_vs_lora": round(probe / lora["saved"], 3),
                        "peak_saved_mb": round(summary["peak_activation_mb"], 2),
                        "trainable_params": summary["trainable_params"],
                        "test_accuracy": round(summary["test_accuracy"], 4),
                        "delta_points": round(100 * (summary["test_accuracy"] - lora["accuracy"]), 2),
                        "lr": cfg.train.lr,
                        "steps": summary["steps"],
                        "wall_s": round(summary["wall_s"], 1),
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    main()
