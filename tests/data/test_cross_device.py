"""The StackOverflow-shaped cross-device population: generated per client, heavy-tailed, learnable."""

from __future__ import annotations

import math
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fedsim.config import ConfigError, parse_config
from fedsim.data.build import build_dataset
from fedsim.data.cross_device import SIGMA, CrossDeviceText
from fedsim.models import build_model
from fedsim.sim.rounds.engine import Engine

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cross_device.yaml"


def population(**data: object) -> CrossDeviceText:
    tree = yaml.safe_load(EXAMPLE.read_text())
    tree["data"].update(data)
    dataset = build_dataset(parse_config(tree).data, seed=0)
    assert isinstance(dataset, CrossDeviceText)
    return dataset


def test_a_client_is_the_same_every_time_and_its_size_is_known_without_generating_it() -> None:
    data = population()
    for cid in (0, 17, 342_476):
        a, b = data.client(cid), data.client(cid)
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)
        assert data.n_samples(cid) == a.n_samples == a.x.shape[0]
        assert a.x.shape[1:] == (20,) and a.x.dtype == torch.float32 and a.y.dtype == torch.int64
        assert torch.equal(a.x[:, 1:].long(), a.y[:, :-1])  # targets are the inputs shifted by one
        assert int(a.y.max()) < 2000 and int(a.x.min()) >= 0
    assert not torch.equal(data.client(1).x[:1], data.client(2).x[:1])


def test_sizes_are_lognormal_with_the_stated_mean_then_capped() -> None:
    data = population(max_samples=10**9)  # uncapped: the lognormal itself
    sizes = np.array([data.n_samples(cid) for cid in range(20_000)])
    assert abs(sizes.mean() / 397 - 1) < 0.1
    assert abs(np.median(sizes) - 397 * math.exp(-(SIGMA**2) / 2)) < 15  # median exp(mu) ~ 128: a heavy tail
    capped = population()
    assert max(capped.n_samples(cid) for cid in range(2000)) == 128


def test_clients_write_about_their_own_topic() -> None:
    data = population()
    a, b = data.client(3).y.flatten(), data.client(4).y.flatten()
    top_a = set(torch.bincount(a, minlength=2000).topk(5).indices.tolist())
    top_b = set(torch.bincount(b, minlength=2000).topk(5).indices.tolist())
    assert top_a != top_b


def test_building_342477_clients_allocates_nothing_per_client() -> None:
    tracemalloc.start()
    try:
        data = population()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert data.num_clients == 342_477 and data.test.n_samples == 2000
    assert peak < 4 << 20  # the test split and 16 topic orders; a byte per client would already be 342 KB


def test_the_example_trains_and_its_perplexity_falls(tmp_path: Path) -> None:
    tree = yaml.safe_load(EXAMPLE.read_text())
    tree.update(rounds=3, clients_per_round=10, eval_every=1, progress=False)
    tree["data"].update(max_samples=32, test_samples=300)
    engine = Engine(parse_config(tree), out_dir=tmp_path / "out", db_path=tmp_path / "fedsim.db")
    summary = engine.run()
    assert summary.clients == 342_477 and summary.task == "language_model"
    assert summary.final_metrics["perplexity"] < 1990  # about the vocabulary's 2000 before training


def test_next_word_lstm_predicts_every_position_and_refuses_flat_inputs() -> None:
    cfg = parse_config(yaml.safe_load(EXAMPLE.read_text()))
    model = build_model(cfg.model, (20,), 2000, seed=0)
    assert model(torch.zeros(3, 20)).shape == (3, 20, 2000)
    with pytest.raises(ConfigError, match="next_word_lstm needs sequences"):
        build_model(cfg.model, (4, 5), 2000, seed=0)
    with pytest.raises(ConfigError, match=r"\[units\] or \[embedding, units\]"):
        build_model(cfg.model.model_copy(update={"hidden": (1, 2, 3)}), (20,), 2000, seed=0)
