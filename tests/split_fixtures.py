"""Split fine-tuning fixtures (the encoder, a tiny SST-2-style dataset, an ONNX bottom), registered in conftest."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from transformers import BertModel

from fedsim.split.config import SplitConfig
from fedsim.split.model import load_encoder

POSITIVE = ["a great film", "wonderful and moving", "funny , warm and smart", "the best movie this year", "superb"]
NEGATIVE = ["a dull mess", "boring and far too long", "awful acting", "the worst film this year", "tedious"]


@pytest.fixture(scope="session")
def pretrained() -> BertModel:
    return load_encoder()


@pytest.fixture
def encoder(pretrained: BertModel) -> BertModel:
    """A fresh copy: adapters are inserted in place, so every trainer needs its own."""
    return copy.deepcopy(pretrained)


def write_sst2(directory: Path, repeat: int = 4) -> Path:
    """``train.tsv`` and ``test.tsv`` of short sentences whose sentiment a few steps can learn."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = [(s, 1) for s in POSITIVE] + [(s, 0) for s in NEGATIVE]
    for name, times in (("train", repeat), ("test", 1)):
        body = "".join(f"{s}\t{label}\n" for _ in range(times) for s, label in rows)
        (directory / f"{name}.tsv").write_text("sentence\tlabel\n" + body)
    return directory


@pytest.fixture
def sst2_dir(tmp_path: Path) -> Path:
    return write_sst2(tmp_path / "sst2")


def split_config(**tree: Any) -> SplitConfig:
    """A split config with one top layer (k=5), small batches and few steps, overridden by ``tree``."""
    base: dict[str, Any] = {
        "model": {"split_layer": 5, "max_length": 16},
        "train": {"steps": 4, "batch_size": 8, "lr": 5e-3},
    }
    for key, value in tree.items():
        if isinstance(value, dict):
            base.setdefault(key, {}).update(value)
        else:
            base[key] = value
    return SplitConfig.model_validate(base)


ConfigFactory = Callable[..., SplitConfig]


@pytest.fixture(scope="session")
def onnx_bottom(pretrained: BertModel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bottom of the test configs (k=5) exported to ONNX once per session."""
    from edge.export import export_bottom
    from fedsim.split.model import split_encoder

    bottom, _ = split_encoder(copy.deepcopy(pretrained), 5, num_labels=2)
    path = tmp_path_factory.mktemp("onnx") / "bottom.onnx"
    export_bottom(bottom, path)
    return path
