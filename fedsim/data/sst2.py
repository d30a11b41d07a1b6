"""SST-2 sentences from GLUE-style TSV files: a ``sentence<TAB>label`` header, then one sentence per line."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fedsim.config import ConfigError


@dataclass(frozen=True)
class Sentences:
    """Sentences and their integer labels, aligned."""

    texts: list[str]
    labels: np.ndarray  # (n,) int64

    def __len__(self) -> int:
        return len(self.texts)

    def take(self, index: np.ndarray | list[int]) -> Sentences:
        return Sentences([self.texts[i] for i in index], self.labels[np.asarray(index, dtype=np.int64)])


def read_tsv(path: Path, num_labels: int = 2, limit: int | None = None) -> Sentences:
    """Read ``path``; every label must be an integer in ``0..num_labels-1``. ``limit`` keeps the first rows."""
    if not path.is_file():
        raise ConfigError(f"{path}: file not found (SST-2 TSV with a 'sentence<TAB>label' header)")
    texts: list[str] = []
    labels: list[int] = []
    with path.open(encoding="utf-8") as fh:
        header = fh.readline().rstrip("\r\n").split("\t")
        if header[:2] != ["sentence", "label"]:
            raise ConfigError(f"{path}: header is {header!r}, expected ['sentence', 'label']")
        for lineno, line in enumerate(fh, start=2):
            if limit is not None and len(texts) >= limit:
                break
            sentence, sep, raw = line.rstrip("\r\n").rpartition("\t")
            try:
                label = int(raw)
            except ValueError:
                label = -1
            if not sep or not 0 <= label < num_labels:
                raise ConfigError(
                    f"{path}:{lineno}: expected 'sentence<TAB>label' with label in 0..{num_labels - 1} "
                    f"(model.num_labels={num_labels})"
                )
            texts.append(sentence.strip())
            labels.append(label)
    if not texts:
        raise ConfigError(f"{path}: no sentences")
    return Sentences(texts, np.asarray(labels, dtype=np.int64))


def load_sst2(directory: Path, split: str, num_labels: int = 2, limit: int | None = None) -> Sentences:
    """``split`` is train, dev or test (test.tsv holds the labelled GLUE dev set)."""
    return read_tsv(Path(directory) / f"{split}.tsv", num_labels, limit)
