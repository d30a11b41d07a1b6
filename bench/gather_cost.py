"""What a gathered aggregation rule costs against the weighted sum: seconds and bytes for one round's updates.

``--clients`` updates of ``--numel`` float32 values (random), added into a sum (the mean's path: one
multiply-add per client into one buffer) or written into the gathered rows and reduced by each rule. Prints one
JSON line per rule: the median of ``--repeats`` timings, the ratio to the sum, and the bytes each path holds
(the sum: one update; gathered: all of them, or the budget's column block once spilled with ``--memory-mb``).

    python bench/gather_cost.py [--clients 50] [--numel 1000000] [--memory-mb 512] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from fedsim.robust.bulyan import bulyan
from fedsim.robust.gather import GatheredRows
from fedsim.robust.geometric_median import geometric_median
from fedsim.robust.krum import multi_krum
from fedsim.robust.median import coordinate_median
from fedsim.robust.trimmed_mean import trimmed_mean

RULES: dict[str, Callable[[GatheredRows], torch.Tensor]] = {
    "median": coordinate_median,
    "trimmed_mean": lambda r: trimmed_mean(r, 0.2),
    "multi_krum": lambda r: multi_krum(r, 10, r.n - 10),
    "bulyan": lambda r: bulyan(r, 10),
    "geometric_median": lambda r: geometric_median(r, 8, 1e-6),
}


def timed(fn: Callable[[], object], repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--numel", type=int, default=1_000_000)
    parser.add_argument("--memory-mb", type=float, default=512.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    n, numel = args.clients, args.numel
    updates = torch.randn(n, numel, generator=torch.Generator().manual_seed(0)) * 0.01
    weights = torch.rand(n, generator=torch.Generator().manual_seed(1)) + 0.5
    budget = int(args.memory_mb * 2**20)

    def summed() -> None:
        total = torch.zeros(numel)
        for k in range(n):
            total.add_(updates[k], alpha=float(weights[k]))

    sum_s = timed(summed, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        for name, rule in RULES.items():

            def gathered(rule: Callable[[GatheredRows], torch.Tensor] = rule) -> None:
                rows = GatheredRows(list(range(n)), numel, budget, Path(tmp) / "spill.f32", torch.device("cpu"))
                for k in range(n):
                    rows.put_([k], updates[k : k + 1], weights[k : k + 1])
                rule(rows)

            seconds = timed(gathered, args.repeats)
            probe = GatheredRows(list(range(n)), numel, budget, Path(tmp) / "probe.f32", torch.device("cpu"))
            held = min(n * numel * 4, n * probe.block * 4) if probe.spilled else n * numel * 4
            line = {
                "bench": "gather_cost",
                "rule": name,
                "clients": n,
                "numel": numel,
                "spilled": probe.spilled,
                "sum_s": round(sum_s, 4),
                "rule_s": round(seconds, 4),
                "vs_sum": round(seconds / sum_s, 1),
                "sum_bytes": numel * 4,
                "gathered_bytes_in_memory": held,
                "threads": args.threads,
            }
            del probe
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
