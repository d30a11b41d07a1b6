"""fedsim's default thread choice against ``threads=1`` on cores that other work keeps busy.

Workload: the quickstart (examples/quickstart.yaml: 100 digits clients, the GroupNorm CNN, 50 clients a round),
``--rounds`` rounds, with one CPU-burning process per core running beside it the whole time. Each repeat runs
the default (no ``threads`` in the config: fedsim chooses) and ``threads=1`` back to back, in alternating
order; ``ratio`` is the median over repeats of default seconds / threads=1 seconds (target <= 1.2), and
``chosen`` the count the default picked, as summary.json records it. ``all_cores_s`` times torch's own default
(every core, ``threads=N``) in the same repeats, for what the choice saves.

    python bench/threads.py [--rounds 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def burn() -> None:
    while True:
        pass


def run(rounds: int, threads: int | None, work: Path, tag: str) -> tuple[float, int]:
    sets = ["--set", f"rounds={rounds}", "--set", "eval_every=0", "--set", "progress=false"]
    if threads is not None:
        sets += ["--set", f"threads={threads}"]
    out = work / tag
    command = [sys.executable, "-m", "fedsim.cli", "run", str(ROOT / "examples" / "quickstart.yaml"), *sets]
    start = time.perf_counter()
    subprocess.run([*command, "--out", str(out), "--db", str(work / "runs.db")], check=True, capture_output=True)
    seconds = time.perf_counter() - start
    return seconds, int(json.loads((out / "summary.json").read_text())["threads"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    burners = [mp.Process(target=burn, daemon=True) for _ in range(os.cpu_count() or 1)]
    for p in burners:
        p.start()
    ratios, default_s, one_s, all_s, chosen = [], [], [], [], 0
    cores = os.cpu_count() or 1
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for k in range(args.repeats):
                order = [None, 1, cores] if k % 2 == 0 else [cores, 1, None]
                seconds: dict[int | None, float] = {}
                for threads in order:
                    seconds[threads], picked = run(args.rounds, threads, Path(tmp), f"{k}-{threads}")
                    if threads is None:
                        chosen = picked
                default_s.append(seconds[None])
                one_s.append(seconds[1])
                all_s.append(seconds[cores])
                ratios.append(seconds[None] / seconds[1])
    finally:
        for p in burners:
            p.terminate()
    print(
        json.dumps(
            {
                "bench": "threads",
                "rounds": args.rounds,
                "busy_cores": len(burners),
                "chosen": chosen,
                "default_s": [round(s, 2) for s in default_s],
                "threads1_s": [round(s, 2) for s in one_s],
                "all_cores_s": [round(s, 2) for s in all_s],
                "ratio": round(statistics.median(ratios), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
