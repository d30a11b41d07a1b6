"""The defences that claim to survive the strong attacks: FLTrust (Cao et al., NDSS 2021) and FLAME (Nguyen et
al., USENIX Security 2022), each against a direct numpy implementation of its paper's formula on fixed inputs
(FLAME's clustering on a case whose clusters are known by construction), the server's root set, and whole
runs: one and two ranks alike, a resume bit-identical, and what each does to an attack the mean cannot stand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedsim.api.launch import final_weights
from fedsim.config import parse_config
from fedsim.data import build_dataset
from fedsim.robust.flame import admitted, flame, model_cosine_distances
from fedsim.robust.fltrust import fltrust
from fedsim.robust.gather import GatheredRows
from fedsim.robust.root import root_samples
from fedsim.sim.rounds.engine import Engine
from tests.conftest import on_one_and_two_ranks, tiny_config

MLP = {"kind": "mlp", "hidden": [16]}


def _rows(x: np.ndarray, tmp_path: Path) -> GatheredRows:
    rows = GatheredRows(list(range(len(x))), x.shape[1], 1 << 20, tmp_path / "spill", torch.device("cpu"))
    rows.put_(list(range(len(x))), torch.from_numpy(x.astype(np.float32)), torch.ones(len(x)))
    return rows


def np_fltrust(x: np.ndarray, g0: np.ndarray) -> np.ndarray:
    """The paper's Algorithm 2, line by line: TS_i = ReLU(cos(g_i, g0)); g_i' = ||g0|| / ||g_i|| g_i;
    g = sum_i TS_i g_i' / sum_i TS_i."""
    trust = np.array([max(0.0, float(g @ g0) / (np.linalg.norm(g) * np.linalg.norm(g0))) for g in x])
    normalised = np.array([np.linalg.norm(g0) / np.linalg.norm(g) * g for g in x])
    if trust.sum() == 0:
        return np.zeros(x.shape[1])
    return (trust[:, None] * normalised).sum(0) / trust.sum()


def test_fltrust_is_the_papers_trust_weighted_normalised_mean(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    g0 = rng.normal(size=30)
    x = g0 + rng.normal(scale=0.8, size=(6, 30))
    x[1] = -3 * g0  # opposed: trust 0
    x[4] = 1000 * x[4]  # long: cut to ||g0||, its direction kept
    got = fltrust(_rows(x, tmp_path), torch.from_numpy(g0)).double().numpy()
    expected = np_fltrust(x, g0)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6)
    assert np.linalg.norm(got) <= np.linalg.norm(g0) * (1 + 1e-5)  # no update can outweigh the server's length
    opposed = -np.abs(rng.normal(size=(3, 30))) * np.sign(g0)
    np.testing.assert_array_equal(fltrust(_rows(opposed, tmp_path), torch.from_numpy(g0)).numpy(), np.zeros(30))


def test_flame_distances_are_the_local_models_cosine_distances(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    start, x = rng.normal(size=20), rng.normal(scale=0.3, size=(5, 20))
    models = start + x
    expected = np.array([[1 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) for b in models] for a in models])
    np.fill_diagonal(expected, 0)
    got = model_cosine_distances(_rows(x, tmp_path), torch.from_numpy(start))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def _flame_case() -> tuple[np.ndarray, np.ndarray]:
    """Seven honest updates near one direction, three attackers' near the opposite one (models around a start
    whose own direction is neither): the majority cluster is among rows 0-6 by construction."""
    rng = np.random.default_rng(6)
    direction = rng.normal(size=50)
    honest = direction * rng.uniform(0.9, 1.1, size=(7, 1)) + rng.normal(scale=0.05, size=(7, 50))
    attack = -4 * direction + rng.normal(scale=0.05, size=(3, 50))
    return np.vstack([honest, attack]), rng.normal(scale=0.1, size=50)


def test_flame_admits_the_majority_cluster_clips_to_the_median_length_and_adds_the_papers_noise(
    tmp_path: Path,
) -> None:
    x, start = _flame_case()
    rows = _rows(x, tmp_path)
    chosen = admitted(model_cosine_distances(rows, torch.from_numpy(start)))
    # a majority (n/2 + 1 = 6 or more), honest only: HDBSCAN's single cluster keeps the points that stay in it
    # to its densest level, so an honest model on the cluster's edge may be left out as noise
    assert len(chosen) >= 6 and set(chosen) <= set(range(7))
    lengths = np.linalg.norm(x, axis=1)
    bound = np.median(lengths)  # over all ten updates, attackers' included (the paper's S_t)
    expected = np.mean([x[i] * min(1.0, bound / np.linalg.norm(x[i])) for i in chosen], axis=0)
    quiet, count = flame(rows, torch.from_numpy(start), 0.0, None)
    np.testing.assert_allclose(quiet.double().numpy(), expected, rtol=2e-5, atol=2e-6)
    assert count == len(chosen)
    wide = np.zeros((10, 20_000))
    wide[:, :50] = x
    noisy, _ = flame(_rows(wide, tmp_path), torch.zeros(20_000), 0.5, torch.Generator().manual_seed(0))
    noise = noisy.double().numpy()[50:] / (0.5 * bound)  # lambda * S_t: unit normal draws
    assert abs(noise.mean()) < 0.03 and abs(noise.std() - 1) < 0.02


def test_the_root_set_is_clean_training_samples_drawn_by_the_seed() -> None:
    cfg = parse_config(tiny_config(data__clients=12))
    dataset = build_dataset(cfg.data, cfg.seed)
    root = root_samples(dataset, 40, seed=0)
    assert root.n_samples == 40 and torch.equal(root.x, root_samples(dataset, 40, seed=0).x)
    assert not torch.equal(root.x, root_samples(dataset, 40, seed=1).x)
    every = torch.cat([dataset.client(c).x.flatten(1) for c in range(12)])
    for sample in root.x.flatten(1):
        assert bool((every == sample).all(1).any())  # each one a training sample of some client
    with pytest.raises(ValueError, match="exceeds the"):
        root_samples(dataset, 10**6, seed=0)


def _tree(**overrides: Any) -> dict[str, Any]:
    return tiny_config(**{"model": MLP, "clients_per_round": 8, "data__clients": 16, **overrides})


@pytest.mark.slow
@pytest.mark.parametrize("rule", [{"kind": "fltrust", "root_samples": 50}, {"kind": "flame", "noise": 0.01}])
def test_fltrust_and_flame_give_the_same_run_on_one_and_two_ranks(rule: dict[str, Any], tmp_path: Path) -> None:
    one, two = on_one_and_two_ranks(_tree(aggregator=rule, attack={"kind": "sign_flip", "fraction": 0.25}), tmp_path)
    torch.testing.assert_close(two, one, rtol=0, atol=2e-5)


def test_a_resumed_flame_run_is_the_whole_run(tmp_path: Path) -> None:
    tree = _tree(rounds=4, aggregator={"kind": "flame"}, checkpoint={"every": 2})
    whole = Engine(parse_config(tree), tmp_path / "whole", tmp_path / "whole.db")
    whole.run()
    cut = Engine(parse_config(tree), tmp_path / "cut", tmp_path / "cut.db")
    cut.run(after_round=lambda row: row.round == 1)
    Engine(parse_config(tree), tmp_path / "cut", tmp_path / "cut.db", resume=True).run()
    torch.testing.assert_close(final_weights(tmp_path / "cut"), final_weights(tmp_path / "whole"), rtol=0, atol=0)
    admitted_rounds = json.loads((tmp_path / "cut" / "summary.json").read_text())["aggregator"]["admitted"]
    assert admitted_rounds == json.loads((tmp_path / "whole" / "summary.json").read_text())["aggregator"]["admitted"]
    assert len(admitted_rounds) == 4


def test_fltrust_keeps_a_sign_flipping_minority_from_the_model(tmp_path: Path) -> None:
    """Three of eight clients a round (on average) send -4 times their update: the mean is wrecked, FLTrust
    (100 clean root samples, about one client's worth) learns, if slower than a clean run: every step it takes
    is the root update's length (measured here: clean 0.69, FLTrust 0.45, the mean 0.10 after 20 rounds)."""
    accuracy = {}
    runs: dict[str, dict[str, Any]] = {
        "clean": {},
        "mean": {"attack": {"kind": "sign_flip", "scale": 4.0, "fraction": 0.375}},
        "fltrust": {
            "attack": {"kind": "sign_flip", "scale": 4.0, "fraction": 0.375},
            "aggregator": {"kind": "fltrust"},
        },
    }
    for name, extra in runs.items():
        engine = Engine(parse_config(_tree(rounds=20, **extra)), tmp_path / name, tmp_path / f"{name}.db")
        engine.run()
        accuracy[name] = json.loads((tmp_path / name / "summary.json").read_text())["final_accuracy"]
    assert accuracy["mean"] < 0.15 and accuracy["fltrust"] > accuracy["mean"] + 0.25, accuracy
    assert accuracy["fltrust"] > 0.5 * accuracy["clean"], accuracy
