"""``metrics.csv``: one row per round, a column per metric name (empty where a round did not record it)."""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class CsvTracker:
    """Rows are appended as rounds end; a metric first seen after the first round (the first evaluation's
    accuracy, say) rewrites the file once with the wider header. A resumed run keeps the rows up to its
    checkpoint's round and goes on after them."""

    def __init__(self, path: Path, resumed_at: int) -> None:
        self.path = path
        self.columns: list[str] = ["round"]
        self.rows: list[dict[str, str]] = []
        if resumed_at and path.is_file():
            with path.open(newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                self.columns = list(reader.fieldnames or ["round"])
                self.rows = [row for row in reader if int(row["round"]) <= resumed_at]
        path.parent.mkdir(parents=True, exist_ok=True)
        self._rewrite()

    def log(self, round: int, metrics: Mapping[str, float]) -> None:
        row = {"round": str(round), **{name: _text(value) for name, value in metrics.items()}}
        self.rows.append(row)
        new = [name for name in row if name not in self.columns]
        if new:
            self.columns += new
            self._rewrite()
            return
        with self.path.open("a", newline="", encoding="utf-8") as f:
            csv.DictWriter(f, self.columns).writerow(row)

    def _rewrite(self) -> None:
        """The whole file under its header, written beside it and renamed over it: never half a file."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        with tmp.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, self.columns)
            writer.writeheader()
            writer.writerows(self.rows)
        os.replace(tmp, self.path)

    def close(self, summary: Mapping[str, Any] | None) -> None:
        return None


def _text(value: float) -> str:
    """A count as an integer, any other number with every digit it has (``repr`` reads back exactly)."""
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
