"""Federated fine-tuning of a pretrained transformer with adapters (peft): what it costs, part by part.

(Not ``bench/peft.py``: run as a script, its folder comes first on ``sys.path`` and the name would hide the peft
package from every import of it, fedsim's included.)

``--part fused``: K clients' LoRA adapters trained by the fused executor over one shared frozen base, against
the sequential executor (one client at a time over the same base) and against K full replicas (a full fine-tune
fused: K copies of every parameter, stacked, as the fused executor trains them). The model is BERT-shaped and
randomly initialised, no download: hidden 256, 4 layers of 4 heads, FFN 1024, vocabulary 30,522 (11.2 M
parameters, 45 MB in fp32); LoRA r=8, alpha 16 on query and value with the classification head trained
(``modules_to_save``), dropout off; LoRA-FA (``--adapter lora_fa``) also freezes every A. Data: K clients x 16
random sentences of 32 token ids (no padding), 2 classes; FedAvg, 1 local epoch of batches of 8 (2 steps), lr
0.05; every client trains every round, the K in one fused group; no evaluation.

Each (mode, K) runs in a process of its own, forked from the script with its imports done, so that its memory
is its own: ``*_peak_mb`` is that process's peak resident memory (Linux VmHWM, reset once the model is built)
above what it held before building the model (the interpreter, the libraries and the data): the model it holds
(one base, or the K copies) and training's peak.
``*_s`` are wall seconds per round over ``--rounds`` rounds after one warm-up round. The full replicas' model
is called without an attention mask (no sentence has padding): under ``vmap`` a Hugging Face model cannot read
its mask's values, and only the adapters' forward runs its base outside ``vmap``
(:mod:`fedsim.sim.executors.shared_base`). ``gflop_per_round`` counts one client's training steps (forward and
backward) with torch's FlopCounterMode, times K; ``*_share_of_peak`` is the rate achieved over this machine's
fp32 rate on 2048 x 2048 matrix products (bench/fused.py's ``matmul_peak``). Each figure is the median over
``--repeats`` (ratios: the median of each repeat's ratio). ``--tiny`` shrinks the model to hidden 32, 2 layers,
vocabulary 1,000 and K to 2 and 4 (a smoke run of seconds).

``--part accuracy``: examples/peft_sst2.yaml (SST-2 over 100 clients, Dirichlet 0.5, 10 a round, the packaged
MiniLM, plain SGD) as full fine-tuning (``--lr-full``), LoRA and LoRA-FA (``--lr``), and LoRA-FA under central DP at
pfl-research's deployment (noise calibrated for epsilon 2 at delta 1e-6 over a noise cohort of 1,000 of a million
clients; clip 0.1): each a ``fedsim run`` of its own, ``--rounds`` rounds on the first ``--limit`` training
sentences (default: all) cut to ``--max-length`` tokens (default: the example's 64), scored on GLUE's dev set at the
end, once per ``--seeds`` seed (the seed draws the split, the cohorts, the head and LoRA's A): accuracy as the mean
over the seeds with its min and max; uplink bytes a round, seconds a round and peak resident memory (medians) from
each summary.json.

``--part causal``: examples/peft_causal.yaml (next-token prediction on SST-2's sentences, 20 clients, 5 a round, a
2-layer GPT-2 of width 32 built from its config, AdamW at ``--lr``) trained whole and with a LoRA adapter (r 8
on ``c_attn``, the attention's fused query-key-value projection): perplexity on GLUE's dev set after
``--rounds`` rounds (mean, min and max over the seeds) with the same costs. No pretrained causal model is
packaged, so the base the adapter trains over is the seed's random one: the row shows the pipeline and its
costs, not what an adapter on a pretrained model gains.

    python bench/peft_costs.py --part fused [--clients 8 32] [--rounds 2] [--repeats 3] [--threads 2]
        [--adapter lora|lora_fa] [--tiny]
    python bench/peft_costs.py --part accuracy [--rounds 20] [--limit N] [--max-length 64] [--lr 0.1]
        [--lr-full 0.02] [--variants full lora lora_fa lora_fa_dp] [--seeds 0 1 2] [--data DIR]
        [--set KEY=VALUE ...]   (every run's config beside the variant's, e.g. algorithm.local_epochs=2)
    python bench/peft_costs.py --part causal [--rounds 10] [--lr 0.01] [--seeds 0 1 2] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import peft
import torch
import transformers
from fused import matmul_peak
from torch import Tensor, nn

from fedsim.config import parse_config
from fedsim.data.base import ArrayDataset, ClientData
from fedsim.sim.rounds.engine import Engine

ROOT = Path(__file__).resolve().parent.parent
SAMPLES, LENGTH, BATCH, CLASSES = 16, 32, 8, 2
BERT = {"vocab_size": 30522, "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4}
TINY = {"vocab_size": 1000, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
MODES = ("fused", "sequential", "replicas")  # the adapters fused, one at a time, a full fine-tune fused


class TokenClassifier(nn.Module):
    """Token ids stored as floats in, logits out, with or without an attention mask (no input has padding)."""

    def __init__(self, model: nn.Module, mask: bool) -> None:
        super().__init__()
        self.model, self.mask = model, mask

    def forward(self, x: Tensor) -> Tensor:
        ids = x.long()
        mask = torch.ones_like(ids) if self.mask else None
        logits: Tensor = self.model(input_ids=ids, attention_mask=mask).logits
        return logits


def build(shape: dict[str, int], adapter: str | None) -> TokenClassifier:
    """The BERT-shaped classifier, seeded; under ``adapter`` (lora or lora_fa) its base frozen by peft."""
    torch.manual_seed(0)
    config = transformers.BertConfig(
        **shape,
        intermediate_size=4 * shape["hidden_size"],
        max_position_embeddings=LENGTH,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    config.num_labels = CLASSES
    model: nn.Module = transformers.BertForSequenceClassification(config)
    if adapter is None:
        return TokenClassifier(model, mask=False)
    lora = peft.LoraConfig(
        r=8, lora_alpha=16, lora_dropout=0.0, target_modules=["query", "value"], modules_to_save=["classifier"]
    )
    model = peft.get_peft_model(model, lora)
    if adapter == "lora_fa":
        for name, p in model.named_parameters():
            if "lora_A" in name:
                p.requires_grad_(False)
    return TokenClassifier(model, mask=True)


def token_data(clients: int, vocab: int) -> ArrayDataset:
    g = torch.Generator().manual_seed(1)
    n = clients * SAMPLES
    x = torch.randint(1, vocab, (n + 8, LENGTH), generator=g).float()
    y = torch.randint(0, CLASSES, (n + 8,), generator=g)
    parts = [np.arange(c * SAMPLES, (c + 1) * SAMPLES) for c in range(clients)]
    return ArrayDataset(x[:n], y[:n], parts, ClientData(x[n:], y[n:]), CLASSES)


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def step_gflop(module: nn.Module, sample: Tensor) -> float:
    """GFLOP of one training step (forward and backward) on ``sample``, counted by torch's FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        logits = module(sample)
        nn.functional.cross_entropy(logits, torch.zeros(len(sample), dtype=torch.long)).backward()
    module.zero_grad(set_to_none=True)
    return counter.get_total_flops() / 1e9


def child(mode: str, clients: int, args: argparse.Namespace, results: Any) -> None:
    """One (mode, K) in this (forked) process: seconds per round, peak resident MB above the pre-model baseline
    and the number of trained parameters, put on ``results``."""
    torch.set_num_threads(args.threads)
    shape = TINY if args.tiny else BERT
    data = token_data(clients, shape["vocab_size"])
    baseline_kb = _status_kb("VmRSS")
    model = build(shape, None if mode == "replicas" else args.adapter)
    tree = {
        "name": f"peft-{mode}",
        "seed": 0,
        "rounds": args.rounds + 1,
        "clients_per_round": clients,
        "eval_every": 0,
        "threads": args.threads,
        "progress": False,
        "data": {"dataset": "random", "clients": clients},  # the dataset is given; this names its size
        "model": {"kind": "logistic"},  # the module is given
        "algorithm": {"kind": "fedavg", "lr": 0.05, "batch_size": BATCH, "local_epochs": 1},
        "executor": {"kind": "sequential" if mode == "sequential" else "fused", "clients": clients},
    }
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        engine = Engine(parse_config(tree), out_dir=out, db_path=out / "runs.db", dataset=data, model=model)
        Path("/proc/self/clear_refs").write_text("5")  # VmHWM from here: building the model's temporaries aside
        engine.round(0)  # warm-up
        t0 = time.perf_counter()
        for r in range(1, args.rounds + 1):
            engine.round(r)
        seconds = (time.perf_counter() - t0) / args.rounds
        peak_kb = _status_kb("VmHWM")
        trainable = engine.replica.n_params
        engine.close()
    results.put({"s": seconds, "peak_mb": (peak_kb - baseline_kb) / 1024, "trainable": trainable})


def forked(mode: str, clients: int, args: argparse.Namespace) -> dict[str, float]:
    """:func:`child`'s figures, measured in a forked process (no import paid again, its memory its own). The
    script runs nothing parallel in torch before it forks: an OpenMP pool does not survive a fork."""
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    process = context.Process(target=child, args=(mode, clients, args, results))
    process.start()
    process.join()
    if process.exitcode != 0:
        raise RuntimeError(f"the {mode} run of {clients} clients failed (exit code {process.exitcode})")
    figures: dict[str, float] = results.get(timeout=60)
    return figures


def fused_part(args: argparse.Namespace) -> dict[str, Any]:
    runs: dict[tuple[str, int], list[dict[str, float]]] = {(m, k): [] for m in MODES for k in args.clients}
    for _ in range(args.repeats):
        for k in args.clients:
            for mode in MODES:
                runs[(mode, k)].append(forked(mode, k, args))
    torch.set_num_threads(args.threads)
    shape = TINY if args.tiny else BERT
    sample = token_data(1, shape["vocab_size"]).client(0).x[:BATCH]
    steps = -(-SAMPLES // BATCH)  # per client and round
    client_gflop = {
        mode: steps * step_gflop(build(shape, None if mode == "replicas" else args.adapter), sample)
        for mode in ("fused", "replicas")
    }
    client_gflop["sequential"] = client_gflop["fused"]
    peak = matmul_peak([args.threads])
    rows = []
    for k in args.clients:

        def median(mode: str, key: str, k: int = k) -> float:
            return statistics.median(r[key] for r in runs[(mode, k)])

        def ratio(num: tuple[str, str], den: tuple[str, str], k: int = k) -> float:
            pairs = zip(runs[(num[0], k)], runs[(den[0], k)], strict=True)
            return round(statistics.median(a[num[1]] / b[den[1]] for a, b in pairs), 3)

        row: dict[str, Any] = {"clients": k}
        for mode in MODES:
            seconds = median(mode, "s")
            row[f"{mode}_s"] = round(seconds, 4)
            row[f"{mode}_peak_mb"] = round(median(mode, "peak_mb"), 1)
            row[f"{mode}_share_of_peak"] = round(k * client_gflop[mode] / seconds / peak, 4)
        row["fused_vs_sequential"] = ratio(("sequential", "s"), ("fused", "s"))
        row["replicas_vs_fused_memory"] = ratio(("replicas", "peak_mb"), ("fused", "peak_mb"))
        row["fused_vs_sequential_memory"] = ratio(("fused", "peak_mb"), ("sequential", "peak_mb"))
        row["adapter_gflop_per_round"] = round(k * client_gflop["fused"], 2)
        row["full_gflop_per_round"] = round(k * client_gflop["replicas"], 2)
        rows.append(row)
    first = runs[("fused", args.clients[0])][0]
    full = runs[("replicas", args.clients[0])][0]
    return {
        "trainable_params": int(first["trainable"]),
        "model_params": int(full["trainable"]),
        "rows": rows,
        "peak_gflops": round(peak, 1),
    }


DP = ["kind=central", "clip=0.1", "target_epsilon=2", "delta=1e-6", "population=1000000", "noise_cohort=1000"]
VARIANTS: dict[str, list[str]] = {  # examples/peft_sst2.yaml's command-line changes for each row
    "full": ["--unset", "model.adapter"],
    "lora": ["--set", "model.adapter.kind=lora"],
    "lora_fa": [],
    "lora_fa_dp": [arg for s in DP for arg in ("--set", f"privacy.{s}")],  # pfl-research's deployment
}


def example_run(example: str, variant: list[str], seed: int, lr: float, args: argparse.Namespace) -> dict[str, Any]:
    """``examples/<example>`` as one variant at one seed: a ``fedsim run`` of its own (its own process, so its
    peak resident memory is its own), read back from its summary.json."""
    with tempfile.TemporaryDirectory(prefix="peft-") as scratch:
        out = Path(scratch) / "out"
        sets = [f"rounds={args.rounds}", f"data.dir={args.data}", f"eval_every={args.rounds}", f"seed={seed}"]
        sets += [f"algorithm.lr={lr}"] + [f"data.{k}={v}" for k, v in data_sets(args).items()] + args.set
        cli = "import sys; from fedsim.cli import main; sys.exit(main())"
        command = [sys.executable, "-c", cli, "run", str(ROOT / "examples" / example)]
        command += [arg for value in sets for arg in ("--set", value)] + variant
        where = ["--out", str(out), "--db", str(Path(scratch) / "runs.db")]
        subprocess.run([*command, *where], check=True, stdout=sys.stderr)  # stdout: the one JSON line
        return dict(json.loads((out / "summary.json").read_text()))


def data_sets(args: argparse.Namespace) -> dict[str, int]:
    """``data.limit`` and ``data.max_length`` where given (else the example's own)."""
    return {k: v for k in ("limit", "max_length") if (v := getattr(args, k)) is not None}


def variant_row(name: str, metric: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant's runs: ``metric`` as the mean over the seeds with its min and max, the costs as medians."""
    values = [s["final_accuracy"] if metric == "accuracy" else s["final_metrics"][metric] for s in runs]
    row: dict[str, Any] = {"variant": name, metric: round(statistics.mean(values), 4)}
    row |= {f"{metric}_min": round(min(values), 4), f"{metric}_max": round(max(values), 4)}
    row["uplink_bytes_per_round"] = int(statistics.median(s["bytes_up"] // s["rounds"] for s in runs))
    row["seconds_per_round"] = round(statistics.median(s["rounds_s"] / s["rounds"] for s in runs), 2)
    row["peak_rss_mb"] = round(statistics.median(s["peak_rss_mb"] for s in runs), 1)
    if "privacy" in runs[0]:
        privacy = runs[0]["privacy"]
        row["epsilon"] = privacy.get("deployment", {}).get("epsilon", privacy["epsilon"])
    return row


def seed_major(
    example: str, variants: dict[str, list[str]], lrs: dict[str, float], args: argparse.Namespace
) -> dict[str, list[dict[str, Any]]]:
    """Every variant at a seed before the next seed (a run cut short still holds whole comparisons), each run's
    headline on stderr as it ends."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
    for seed in args.seeds:
        for name, variant in variants.items():
            summary = example_run(example, variant, seed, lrs[name], args)
            runs[name].append(summary)
            said = {"variant": name, "seed": seed, **variant_row(name, "accuracy", [summary])}
            print(json.dumps({**said, "metrics": summary["final_metrics"]}), file=sys.stderr, flush=True)
    return runs


def accuracy_part(args: argparse.Namespace) -> dict[str, Any]:
    """examples/peft_sst2.yaml as each variant at each seed."""
    lrs = {name: args.lr_full if name == "full" else args.lr for name in args.variants}
    runs = seed_major("peft_sst2.yaml", {name: VARIANTS[name] for name in args.variants}, lrs, args)
    rows = [variant_row(name, "accuracy", found) for name, found in runs.items()]
    settings = {k: getattr(args, k) for k in ("limit", "max_length", "lr", "lr_full", "seeds", "set")}
    return {**settings, "rows": rows}


CAUSAL: dict[str, list[str]] = {  # examples/peft_causal.yaml's command-line changes for each row
    "full": [],
    "lora": ["--set", "model.adapter.kind=lora", "--set", "model.adapter.target_modules=[c_attn]"],
}


def causal_part(args: argparse.Namespace) -> dict[str, Any]:
    """examples/peft_causal.yaml (its AdamW at ``--lr``) trained whole and with a LoRA adapter, at each seed."""
    runs = seed_major("peft_causal.yaml", CAUSAL, dict.fromkeys(CAUSAL, args.lr), args)
    rows = [variant_row(name, "perplexity", found) for name, found in runs.items()]
    settings = {k: getattr(args, k) for k in ("limit", "max_length", "lr", "seeds")}
    return {**settings, "rows": rows}


PARTS = {"fused": fused_part, "accuracy": accuracy_part, "causal": causal_part}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=sorted(PARTS), default="fused")
    parser.add_argument("--clients", type=int, nargs="+", default=None, help="K, clients fused in one group")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds, after one warm-up round")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--adapter", choices=("lora", "lora_fa"), default="lora")
    parser.add_argument("--tiny", action="store_true", help="hidden 32, 2 layers, vocabulary 1,000; K 2 and 4")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--limit", type=int, default=None, help="SST-2's first training sentences (the example's)")
    parser.add_argument("--max-length", type=int, default=None, help="tokens a sentence (the example's)")
    parser.add_argument(
        "--lr", type=float, default=None, help="the adapters' learning rate (accuracy 0.1, causal 0.01)"
    )
    parser.add_argument("--lr-full", type=float, default=0.02, help="accuracy: full fine-tuning's")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="more config for every run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="a run per seed")
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data" / "sst2")
    args = parser.parse_args()
    args.lr = args.lr if args.lr is not None else {"causal": 0.01}.get(args.part, 0.1)
    args.clients = args.clients or ([2, 4] if args.tiny else [8, 32])
    result = PARTS[args.part](args)
    settings = {k: getattr(args, k) for k in ("rounds", "repeats", "threads", "adapter", "tiny")}
    line = {"bench": "peft_costs", "part": args.part, **settings, **result, "torch": torch.__version__}
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
