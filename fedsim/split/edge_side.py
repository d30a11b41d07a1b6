"""What an edge device does with its sentences, shared by ``fedsim split`` (simulation) and ``fedsim edge run``.

Each edge client holds its own partition of the training sentences and takes batches from a fresh permutation
every epoch; :func:`send` runs the frozen bottom, strips padding and compresses with the codec. Nothing here
imports torch, the cloud trainer or the run store: an edge device runs it with numpy and ONNX Runtime.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fedsim.comm.codecs import Codec, Encoded, relative_error
from fedsim.data.partition import partition
from fedsim.data.sst2 import Sentences
from fedsim.split.config import SplitConfig
from fedsim.wire.batch import TokenBatch, WireBatch, encode_batch, mask


class BottomEncoder(Protocol):
    """The edge's frozen bottom: sentences in, real-token hidden states out."""

    def encode(self, texts: list[str]) -> TokenBatch: ...


@dataclass
class EdgeClient:
    """One device's data and its pass through it: a fresh permutation every epoch."""

    index: int
    data: Sentences
    rng: np.random.Generator
    _order: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _cursor: int = 0

    def next_indices(self, batch_size: int) -> np.ndarray:
        take: list[np.ndarray] = []
        need = min(batch_size, len(self.data))
        while need > 0:
            if self._cursor >= len(self._order):
                self._order, self._cursor = self.rng.permutation(len(self.data)), 0
            chunk = self._order[self._cursor : self._cursor + need]
            self._cursor += len(chunk)
            need -= len(chunk)
            take.append(chunk)
        return np.concatenate(take)


@dataclass(frozen=True)
class Sent:
    """A message, what it would have cost as fp32 padded to its longest sentence (bytes), and the codec's
    relative reconstruction error (NaN when not measured)."""

    wire: WireBatch
    padded_bytes: int
    error: float


def send(bottom: BottomEncoder, codec: Codec, data: Sentences, measure_error: bool = True) -> Sent:
    """What an edge device does with a batch of its sentences."""
    tokens = bottom.encode(data.texts)
    wire = encode_batch(codec, tokens, data.labels)
    error = float("nan")
    if measure_error:
        decoded = codec.decode(Encoded(wire.codec, wire.shape, wire.payload)).numpy()  # simulation only: needs torch
        if codec.ndim == 3:  # back to the real tokens of the padded batch
            decoded = decoded[mask(wire.lengths, decoded.shape[1])]
        error = relative_error(tokens.tokens, decoded)
    return Sent(wire, tokens.padded_bytes, error)


def calibrate(codec: Codec, bottom: BottomEncoder, data: Sentences, sentences: int, batch: int = 64) -> None:
    """Fit a codec that learns from data (the shared basis: a PCA) to the real tokens of the first
    ``sentences`` of an edge's own data, before anything is sent; a codec without ``calibrate`` is left as it
    is. The same data gives the same basis, so a resumed run calibrates to the one it had."""
    fit = getattr(codec, "calibrate", None)
    if fit is None or len(data) == 0:
        return
    n = min(sentences, len(data))
    starts = range(0, n, batch)
    fit(np.concatenate([bottom.encode(data.take(np.arange(s, min(s + batch, n))).texts).tokens for s in starts]))


def encode_sentences(bottom: BottomEncoder, codec: Codec, data: Sentences, batch: int) -> list[WireBatch]:
    """``data`` in batches of ``batch`` sentences, each as the edge sends it."""
    starts = range(0, len(data), batch)
    chunks = (data.take(np.arange(s, min(s + batch, len(data)))) for s in starts)
    return [send(bottom, codec, chunk, measure_error=False).wire for chunk in chunks]


def edge_clients(cfg: SplitConfig, train: Sentences) -> list[EdgeClient]:
    """Partition ``train`` among ``cfg.data.clients`` devices as ``cfg.data.partition`` says."""
    rng = np.random.default_rng(cfg.seed)
    parts = partition(cfg.data.partition, train.labels, cfg.data.clients, rng)
    return [EdgeClient(k, train.take(part), np.random.default_rng([cfg.seed, k])) for k, part in enumerate(parts)]
