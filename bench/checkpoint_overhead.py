"""What checkpointing every round costs a run, CheckFreq-style (snapshot in memory, write in the background).

Workload: examples/quickstart.yaml (100 digits clients, 50 per round, GroupNorm CNN) with SCAFFOLD, so each
checkpoint holds the global model, the server control variate, the RNG streams and every client's control
variate; 30 rounds, one torch thread. Each repeat runs it with ``checkpoint.every: k`` (default 1) and without
checkpoints, side by side. ``foreground_s`` is the time the round loop spent on checkpoints (taking the
snapshot, and waiting if the previous write had not finished); ``overhead`` is the relative growth of the
rounds' wall time, foreground included. Medians over the repeats.

    python bench/checkpoint_overhead.py [--every 1] [--rounds 30] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import torch

from fedsim.api.launch import execute
from fedsim.config import load_config

QUICKSTART = Path(__file__).resolve().parent.parent / "examples" / "quickstart.yaml"


def timed_run(rounds: int, every: int, workdir: Path) -> tuple[float, float]:
    """(seconds of the rounds including checkpoint stalls, seconds of checkpoint stalls)."""
    sets = [f"rounds={rounds}", "algorithm.kind=scaffold", "threads=1", "progress=false", "eval_every=0"]
    cfg = load_config(QUICKSTART, [*sets, f"checkpoint.every={every}", "checkpoint.keep=2"])
    summary = execute(cfg, workdir / f"every{every}", workdir / "fedsim.db")
    return summary.rounds_s + summary.checkpoint_s, summary.checkpoint_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--every", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    checkpoints = (args.rounds - 1) // args.every  # none after the last round: the final model is saved anyway
    plain, with_ckpt, foreground = [], [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            plain.append(timed_run(args.rounds, 0, Path(tmp))[0])
            total, stall = timed_run(args.rounds, args.every, Path(tmp))
            with_ckpt.append(total)
            foreground.append(stall)
    print(
        json.dumps(
            {
                "bench": "checkpoint_overhead",
                "workload": "quickstart+scaffold",
                "rounds": args.rounds,
                "repeats": args.repeats,
                "every": args.every,
                "round_s": round(statistics.median(plain) / args.rounds, 4),
                "foreground_s_per_checkpoint": round(statistics.median(foreground) / checkpoints, 4),
                "foreground_share": round(
                    statistics.median(f / t for f, t in zip(foreground, with_ckpt, strict=True)), 4
                ),
                "overhead": round(statistics.median(c / p - 1 for c, p in zip(with_ckpt, plain, strict=True)), 4),
            }
        )
    )


if __name__ == "__main__":
    main()
