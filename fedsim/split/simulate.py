"""``fedsim split``: N edge clients and the cloud trainer in one process, the same parts as in deployment.

Each edge client holds its own label-skewed partition of the training sentences and sends one batch per turn
(clients take turns round-robin): tokenise, run the frozen bottom, strip padding, compress with the codec. The
cloud decodes and takes one optimiser step. The bottom is injected (``BottomEncoder``): the command line passes
the ONNX Runtime session from ``edge/``, tests may pass torch's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from fedsim.comm.codecs import Codec, Encoded, build_codec, relative_error
from fedsim.data.partition import partition
from fedsim.data.sst2 import Sentences, load_sst2
from fedsim.runstore import ClientRow, RoundRow, RunStore
from fedsim.split.config import SplitConfig
from fedsim.split.trainer import CloudTrainer, EvalResult
from fedsim.split.wire import TokenBatch, WireBatch, encode_batch


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
    """A message and what it would have cost uncompressed."""

    wire: WireBatch
    padded_bytes: int
    error: float


def send(bottom: BottomEncoder, codec: Codec, data: Sentences, measure_error: bool = True) -> Sent:
    """What an edge device does with a batch of its sentences."""
    tokens = bottom.encode(data.texts)
    wire = encode_batch(codec, tokens, data.labels)
    error = float("nan")
    if measure_error:
        decoded = codec.decode(Encoded(wire.codec, wire.shape, wire.payload))
        if codec.ndim == 3:  # back to the real tokens of the padded batch
            lengths = torch.from_numpy(wire.lengths)
            decoded = decoded[torch.arange(decoded.shape[1])[None, :] < lengths[:, None]]
        error = relative_error(torch.from_numpy(tokens.tokens), decoded)
    return Sent(wire, tokens.padded_bytes, error)


def encode_sentences(bottom: BottomEncoder, codec: Codec, data: Sentences, batch: int) -> list[WireBatch]:
    """``data`` in batches of ``batch`` sentences, each as the edge sends it."""
    starts = range(0, len(data), batch)
    chunks = (data.take(np.arange(s, min(s + batch, len(data)))) for s in starts)
    return [send(bottom, codec, chunk, measure_error=False).wire for chunk in chunks]


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    """``out/summary.json``, swapped in whole by rename."""
    tmp = out / ".summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    tmp.replace(out / "summary.json")


def edge_clients(cfg: SplitConfig, train: Sentences) -> list[EdgeClient]:
    """Partition ``train`` among ``cfg.data.clients`` devices as ``cfg.data.partition`` says."""
    rng = np.random.default_rng(cfg.seed)
    parts = partition(cfg.data.partition, train.labels, cfg.data.clients, rng)
    return [EdgeClient(k, train.take(part), np.random.default_rng([cfg.seed, k])) for k, part in enumerate(parts)]


def evaluate(trainer: CloudTrainer, test: list[WireBatch]) -> EvalResult:
    """Accuracy on the test set as :func:`encode_sentences` sent it (through the training batches' codec)."""
    return sum((trainer.evaluate(batch) for batch in test), EvalResult(0, 0, 0.0))


def _batches(clients: list[EdgeClient], steps: int, batch: int) -> Iterator[tuple[int, EdgeClient, np.ndarray]]:
    for step in range(1, steps + 1):
        client = clients[(step - 1) % len(clients)]
        yield step, client, client.next_indices(batch)


def run_split(
    cfg: SplitConfig,
    out: Path,
    db: Path,
    bottom: BottomEncoder,
    trainer: CloudTrainer | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> dict[str, Any]:
    """Train for ``cfg.train.steps`` steps, evaluate on test.tsv, save adapters and ``summary.json`` in ``out``."""
    directory = Path(cfg.data.dir)
    train = load_sst2(directory, "train", cfg.model.num_labels, cfg.data.train_limit)
    test = load_sst2(directory, "test", cfg.model.num_labels, cfg.data.test_limit)
    clients = edge_clients(cfg, train)
    codec = build_codec(cfg.codec)
    trainer = CloudTrainer(cfg) if trainer is None else trainer
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg.model_dump(mode="json"), indent=2) + "\n")

    bytes_up = bytes_padded = 0
    errors: list[float] = []
    test_wires: list[WireBatch] | None = None
    last: EvalResult | None = None
    t0 = time.perf_counter()
    with RunStore(db) as store:
        run_id = store.start_run(cfg.name, "split", cfg.model_dump(mode="json"), cfg.train.steps)
        try:
            for step, client, index in _batches(clients, cfg.train.steps, cfg.train.batch_size):
                start = time.time()
                sent = send(bottom, codec, client.data.take(index))
                result = trainer.train_step(sent.wire)
                trained = time.time()  # the client's turn ends here; evaluation is the cloud's own time
                bytes_up += sent.wire.nbytes
                bytes_padded += sent.padded_bytes
                errors.append(sent.error)
                evaluated = (cfg.train.eval_every > 0 and step % cfg.train.eval_every == 0) or step == cfg.train.steps
                if evaluated:
                    if test_wires is None:  # the bottom and codec are fixed: encode the test set once per run
                        test_wires = encode_sentences(bottom, codec, test, cfg.train.eval_batch_size)
                    last = evaluate(trainer, test_wires)
                metrics = {
                    "codec": codec.spec,
                    "bytes_uncompressed": sent.padded_bytes,
                    "reconstruction_error": sent.error,
                    "client": client.index,
                }
                row = RoundRow(
                    run_id,
                    step,
                    result.loss,
                    last.accuracy if evaluated and last else None,
                    last.loss if evaluated and last else None,
                    sent.wire.nbytes,
                    0,
                    time.perf_counter() - t0,
                    trained - start,
                    result.examples,
                    1,
                    json.dumps(metrics),
                )
                clients_row = ClientRow(run_id, step, client.index, 0, start, trained, result.examples, result.loss)
                store.log_round(run_id, row, [clients_row])
                every = cfg.train.checkpoint_every
                if every and step % every == 0 and step < cfg.train.steps:
                    trainer.save(out)
                if on_step is not None:
                    on_step(step, result.loss)
            adapters = trainer.save(out)
            assert last is not None
            summary = {
                "run_id": run_id,
                "codec": codec.spec,
                "adapter": cfg.adapter.mode,
                "test_accuracy": last.accuracy,
                "test_loss": last.loss,
                "bytes_up": bytes_up,
                "bytes_uncompressed": bytes_padded,
                "compression_ratio": bytes_padded / max(bytes_up, 1),
                "reconstruction_error": float(np.mean(errors)),
                "steps": trainer.step,
                "wall_s": time.perf_counter() - t0,
                "peak_activation_mb": trainer.peak_activation_mb,
                "trainable_params": trainer.trainable_params,
                "adapters": str(adapters),
            }
            write_summary(out, summary)
            store.finish_run(run_id, "finished", summary)
        except BaseException:
            store.finish_run(run_id, "failed", None)
            raise
    return summary
