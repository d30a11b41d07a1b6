"""The bytes-against-accuracy frontier of ``bench/compressors.py``'s lines: one panel per workload, each setting
a point at (its uplink's compression against dense FedAvg, its mean final accuracy) with the seeds' range.

    python bench/compressors.py > compressors.jsonl && python bench/frontier.py compressors.jsonl docs/img/frontier.png

Needs matplotlib (the dev extra); prints one JSON line naming the figure it wrote.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lines", type=Path)
    parser.add_argument("figure", type=Path)
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in args.lines.read_text().splitlines() if line.strip()]
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    fig, axes = plt.subplots(1, len(workloads), figsize=(6 * len(workloads), 4.5), squeeze=False)
    for ax, name in zip(axes[0], workloads, strict=True):
        for r in (r for r in rows if r["workload"] == name):
            low, high = min(r["accuracies"]), max(r["accuracies"])
            mean = r["final_accuracy"]
            ax.errorbar(r["ratio_vs_dense"], mean, yerr=[[mean - low], [high - mean]], fmt="o", capsize=3)
            ax.annotate(
                r["setting"], (r["ratio_vs_dense"], mean), textcoords="offset points", xytext=(4, 4), fontsize=8
            )
        ax.set_xscale("log")
        ax.set_xlabel("uplink compression against dense FedAvg (x, log scale)")
        ax.set_ylabel("final test accuracy (mean of seeds; bars: range)")
        ax.set_title(name)
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    args.figure.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.figure, dpi=110)
    print(json.dumps({"bench": "frontier", "figure": str(args.figure), "points": len(rows)}))


if __name__ == "__main__":
    main()
