"""Federated evaluation: clients hold part of their data back; each evaluated round scores the global model and
Ditto's personal models on the round's clients' held-out data and reports the mean and 10th/90th percentiles."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fedsim.config import RandomData
from fedsim.data.holdout import LocalHoldout
from fedsim.data.random import RandomDataset
from fedsim.runstore import RunStore
from fedsim.sim.rounds.federated_eval import ClientScore, Spread, summarize
from tests.conftest import RunFactory, tiny_config


def test_holdout_splits_every_client_disjointly_and_deterministically() -> None:
    from fedsim.config import parse_config

    data = parse_config({"data": {"dataset": "random", "clients": 5, "features": 4}}).data
    assert isinstance(data, RandomData)
    base = RandomDataset(data, seed=0)
    held = LocalHoldout(base, 0.25, seed=3)
    again = LocalHoldout(base, 0.25, seed=3)
    for cid in range(5):
        whole, train, test = base.client(cid), held.client(cid), held.heldout(cid)
        assert held.n_samples(cid) == train.n_samples == 48 and test.n_samples == 16
        rows = torch.cat([train.x, test.x])
        assert torch.unique(rows, dim=0).shape[0] == whole.n_samples  # disjoint and covering
        assert torch.equal(again.heldout(cid).x, test.x)
    assert not torch.equal(LocalHoldout(base, 0.25, seed=4).heldout(0).x, held.heldout(0).x)
    assert held.held(1) == 0 and held.held(2) == 1  # a one-sample client keeps its sample for training


def test_spread_is_mean_and_percentiles() -> None:
    values = list(np.linspace(0.0, 1.0, 11))
    spread = Spread.of(values)
    assert (spread.mean, spread.p10, spread.p90) == pytest.approx((0.5, 0.1, 0.9))
    summary = summarize([ClientScore(k, v, v + 0.1) for k, v in enumerate(values)], "accuracy")
    assert summary["clients"] == 11 and summary["personal_mean"] == pytest.approx(0.6)
    assert summarize([], "accuracy") == {}


def test_ditto_personal_models_beat_the_global_model_on_skewed_clients(run_engine: RunFactory) -> None:
    tree = tiny_config(
        rounds=6,
        clients_per_round=10,
        data={"dataset": "digits", "clients": 10, "partition": {"kind": "shards", "labels_per_client": 2}},
        algorithm={"kind": "ditto", "lr": 0.1, "batch_size": 16, "local_epochs": 2, "lam": 0.1},
        federated_eval={"kind": "holdout", "holdout": 0.3},
    )
    engine = run_engine(tree)
    with RunStore.open_readonly(engine.out_dir / "fedsim.db") as store:
        (run,) = store.list_runs()
        rounds = store.rounds(run.run_id)
    spreads = [json.loads(r.metrics_json)["fed_eval"] for r in rounds]
    assert len(spreads) == 6
    last = spreads[-1]
    assert last["metric"] == "accuracy" and last["clients"] == 10
    assert last["p10"] <= last["mean"] <= last["p90"]
    assert last["personal_p10"] <= last["personal_mean"] <= last["personal_p90"]
    # two labels per client: a personal model that only has to tell two digits apart does better
    assert last["personal_mean"] > last["mean"] + 0.05, last
    summary = json.loads((engine.out_dir / "summary.json").read_text())
    assert summary["federated_eval"] == last
    # held-out samples never train: the round's samples are the clients' training parts
    assert rounds[0].samples == sum(engine.dataset.n_samples(c) for c in range(10)) * 2


def test_no_holdout_no_federated_evaluation(run_engine: RunFactory) -> None:
    engine = run_engine(tiny_config(rounds=1))
    with RunStore.open_readonly(engine.out_dir / "fedsim.db") as store:
        (run,) = store.list_runs()
        (row,) = store.rounds(run.run_id)
    assert "fed_eval" not in json.loads(row.metrics_json)
    assert engine.dataset.n_samples(0) == engine.dataset.client(0).n_samples
