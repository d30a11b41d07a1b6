"""The summary of bench/robust.py's lines, as docs/benchmarks.md shows it: for each fraction and attack, the
mean's accuracy, the best defence and its accuracy, the median's and trimmed mean's drops from clean FedAvg,
FLTrust's and FLAME's accuracies, and the backdoor's success under the best defence (a Markdown table on
stdout; in a backdoor row each accuracy has its rule's backdoor success in brackets).

    python bench/robust.py --fraction 0.1 0.2 0.3 > robust.jsonl
    python bench/robust_table.py robust.jsonl [more.jsonl ...]

Lines from several files (runs split across processes or sessions) are merged; a later line for the same
(fraction, attack, aggregator) replaces an earlier one. For the backdoor the best defence is the one with the
least success among those within 5 points of clean accuracy (else the most accurate)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def read(paths: list[Path]) -> dict[tuple[float, str, str], dict[str, Any]]:
    rows: dict[tuple[float, str, str], dict[str, Any]] = {}
    for path in paths:
        for text in path.read_text().splitlines():
            if not text.startswith("{"):
                continue
            line = json.loads(text)
            if line.get("bench") == "robust" and "final_accuracy" in line:
                rows[(float(line["malicious"]), line["attack"], line["aggregator"])] = line
    return rows


def best(cells: dict[str, dict[str, Any]], attack: str, clean: float) -> tuple[str, dict[str, Any]]:
    defences = {name: line for name, line in cells.items() if name != "mean"}
    if attack == "backdoor":
        close = {n: ln for n, ln in defences.items() if ln["final_accuracy"] >= clean - 0.05}
        if close:
            return min(close.items(), key=lambda item: (item[1]["backdoor_success"], -item[1]["final_accuracy"]))
    return max(defences.items(), key=lambda item: item[1]["final_accuracy"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    args = parser.parse_args()
    rows = read(args.files)
    clean_line = rows.get((0.0, "none", "mean"))
    clean = clean_line["final_accuracy"] if clean_line else float("nan")

    def acc(cells: dict[str, dict[str, Any]], name: str) -> str:
        if name not in cells:
            return "-"
        success = cells[name].get("backdoor_success")
        return f"{cells[name]['final_accuracy']:.4f}" + ("" if success is None else f" ({success:.3f})")

    def drop(cells: dict[str, dict[str, Any]], name: str) -> str:
        return f"{clean - cells[name]['final_accuracy']:+.4f}" if name in cells else "-"

    print(f"Clean FedAvg: {clean:.4f}.\n")
    header = ("fraction", "attack", "mean", "best defence (of those run)", "its accuracy", "median drop")
    print("| " + " | ".join((*header, "trimmed mean drop", "fltrust", "flame", "backdoor success")) + " |")
    print("|---" * 10 + "|")
    fractions = sorted({f for f, _, _ in rows if f > 0})
    # one order of attacks for every fraction: as first seen at the smallest fraction that has them
    attacks = list(dict.fromkeys(a for fraction in fractions for f, a, _ in rows if f == fraction))
    for fraction in fractions:
        for attack in attacks:
            cells = {agg: line for (f, a, agg), line in rows.items() if f == fraction and a == attack}
            if not any(name != "mean" for name in cells):  # not run at this fraction, or the mean alone
                continue
            name, line = best(cells, attack, clean)
            success = line.get("backdoor_success")
            print(
                f"| {fraction:g} | {attack} | {acc(cells, 'mean')} | {name} (of {len(cells) - 1}) | "
                f"{line['final_accuracy']:.4f} | {drop(cells, 'median')} | {drop(cells, 'trimmed_mean')} | "
                f"{acc(cells, 'fltrust')} | {acc(cells, 'flame')} | {'-' if success is None else f'{success:.4f}'} |"
            )


if __name__ == "__main__":
    main()
