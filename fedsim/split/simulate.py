"""``fedsim split``: N edge clients and the cloud trainer in one process, the same parts as in deployment.

Each edge client holds its own label-skewed partition of the training sentences and sends one batch per turn
(clients take turns round-robin): tokenise, run the frozen bottom, strip padding, compress with the codec
(:mod:`fedsim.split.edge_side`). The cloud runs the one split step (:mod:`fedsim.split.step`). The bottom is
injected (``BottomEncoder``): the command line passes the ONNX Runtime session from ``edge/``, tests may pass
torch's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from fedsim.comm.codecs import build_codec
from fedsim.comm.ledger import FLOAT32_BYTES
from fedsim.config import ConfigError
from fedsim.data.sst2 import load_sst2
from fedsim.runstore import RunStore
from fedsim.sim.persist.interrupted import stoppable
from fedsim.split.config import SplitConfig
from fedsim.split.edge_side import BottomEncoder, EdgeClient, calibrate, edge_clients, encode_sentences, send
from fedsim.split.lifecycle import SplitRun
from fedsim.split.step import split_step, step_row
from fedsim.split.summary import SplitSummary
from fedsim.split.trainer import CloudTrainer, EvalResult
from fedsim.wire.batch import WireBatch


def evaluate(trainer: CloudTrainer, test: list[WireBatch]) -> EvalResult:
    """Accuracy on the test set as :func:`encode_sentences` sent it (through the training batches' codec)."""
    return sum((trainer.evaluate(batch) for batch in test), EvalResult(0, 0, 0.0))


def write_config(out: Path, cfg: SplitConfig) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg.model_dump(mode="json"), indent=2) + "\n")


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
    on_step: Callable[[int, float, float | None], None] | None = None,
    resume: bool = False,
) -> dict[str, Any]:
    """Train for ``cfg.train.steps`` steps, evaluate on test.tsv, save adapters and ``summary.json`` in ``out``.

    With ``resume`` the run goes on from the newest checkpoint in ``out`` (adapters, optimiser, dropout stream,
    byte counts, the run-store rows up to it): the clients' batch order is replayed without sending, a codec
    that calibrates calibrates on the same sentences again, and the run ends on the same adapters as one that
    was never interrupted."""
    directory = Path(cfg.data.dir)
    train = load_sst2(directory, "train", cfg.model.num_labels, cfg.data.train_limit)
    test = load_sst2(directory, "test", cfg.model.num_labels, cfg.data.test_limit)
    clients = edge_clients(cfg, train)
    codec = build_codec(cfg.codec)
    calibrate(codec, bottom, clients[0].data, cfg.calibration_sentences)  # the shared basis: a PCA, fitted once
    trainer = CloudTrainer(cfg) if trainer is None else trainer
    write_config(out, cfg)

    bytes_up = bytes_padded = bytes_unpadded = 0
    errors: list[float] = []
    test_wires: list[WireBatch] | None = None
    last: EvalResult | None = None
    t0 = time.perf_counter()
    batches = _batches(clients, cfg.train.steps, cfg.train.batch_size)
    progress = trainer.load(out, resume=True) if resume else None
    if resume and progress is None:
        raise ConfigError(f"{out}: the checkpoint has no progress.json: nothing to resume")
    with RunStore(db) as store, SplitRun(store, cfg, progress).ending(out) as run:
        run_id = run.run_id
        if progress is not None:
            bytes_up, bytes_padded, errors = progress["bytes_up"], progress["bytes_padded"], progress["errors"]
            bytes_unpadded = int(progress.get("bytes_unpadded", 0))
            for _ in range(run.done):  # the clients' permutations, drawn again
                next(batches)
        for step, client, index in stoppable(batches):
            start = time.time()
            sent = send(bottom, codec, client.data.take(index))
            record = split_step(trainer, sent.wire, client.index, start=start, error=sent.error)
            bytes_up += record.bytes_sent
            bytes_padded += record.bytes_uncompressed
            bytes_unpadded += FLOAT32_BYTES * int(sent.wire.lengths.sum()) * trainer.hidden_size
            errors.append(sent.error)
            evaluated = (cfg.train.eval_every > 0 and step % cfg.train.eval_every == 0) or step == cfg.train.steps
            if evaluated:
                if test_wires is None:  # the bottom and codec are fixed: encode the test set once per run
                    test_wires = encode_sentences(bottom, codec, test, cfg.train.eval_batch_size)
                last = evaluate(trainer, test_wires)
            row, client_rows = step_row(run_id, step, [record], time.perf_counter() - t0, last if evaluated else None)
            run.log(row, client_rows)
            every = cfg.train.checkpoint_every
            if every and step % every == 0 and step < cfg.train.steps:
                trainer.save(
                    out,
                    {
                        "run_id": run_id,
                        "step": step,
                        "bytes_up": bytes_up,
                        "bytes_padded": bytes_padded,
                        "bytes_unpadded": bytes_unpadded,
                        "errors": errors,
                    },
                )
            if on_step is not None:  # the step's loss, and its test accuracy on an evaluated step
                on_step(step, record.loss, last.accuracy if evaluated and last is not None else None)
        adapters = trainer.save(out)
        assert last is not None
        # the same adapters on fp32 activations: what the codec costs at test time, apart from training
        plain = evaluate(trainer, encode_sentences(bottom, build_codec("fp32"), test, cfg.train.eval_batch_size))
        summary = SplitSummary(
            run_id=run_id,
            codec=codec.spec,
            adapter=cfg.adapter.mode,
            test_accuracy=last.accuracy,
            test_loss=last.loss,
            bytes_up=bytes_up,
            bytes_uncompressed=bytes_padded,
            compression_ratio=bytes_padded / max(bytes_up, 1),
            compression_ratio_unpadded=bytes_unpadded / max(bytes_up, 1),
            test_accuracy_uncompressed=plain.accuracy,
            reconstruction_error=float(np.mean(errors)),
            steps=trainer.step,
            wall_s=time.perf_counter() - t0,
            peak_activation_mb=trainer.peak_activation_mb,
            trainable_params=trainer.trainable_params,
            adapters=str(adapters),
        )
        run.finish(summary, out)
    return summary.as_dict()  # what summary.json holds
