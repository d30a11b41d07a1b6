"""CRAIG coresets in runs: clients train on the weighted subset, keep it in the store until it is `every` rounds
old, resume with it, and the settings that cannot work are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim.algorithms.base import ClientContext
from fedsim.algorithms.local_sgd import local_sgd
from fedsim.api.launch import final_weights
from fedsim.config import ConfigError, parse_config
from fedsim.data.base import ClientData
from fedsim.data.stratified import stratified_subset
from fedsim.sim.rounds.engine import Engine
from tests.conftest import refused, tiny_config


def _tree(**overrides: Any) -> dict[str, Any]:
    tree = {"rounds": 4, "clients_per_round": 10, "threads": 1, "model": {"kind": "mlp", "hidden": [16]}}
    return tiny_config(**{**tree, "coreset": {"kind": "craig", "fraction": 0.3, "every": 2}, **overrides})


def _engine(tmp_path: Path, name: str, tree: dict[str, Any], resume: bool = False) -> Engine:
    return Engine(parse_config(tree), tmp_path / name, tmp_path / name / "runs.db", resume=resume)


def test_clients_train_on_their_subset_and_choose_again_when_it_is_old(tmp_path: Path) -> None:
    dense = _engine(tmp_path, "dense", {**_tree(), "coreset": {}})
    dense.run()
    subset = _engine(tmp_path, "craig", _tree())
    chosen: dict[int, list[torch.Tensor]] = {}

    def keep(row: Any) -> bool:
        for cid in range(10):
            chosen.setdefault(cid, []).append(subset.store.get(cid)["coreset.index"].clone())  # type: ignore[index]
        return False

    subset.run(after_round=keep)
    for cid in range(10):
        n = subset.dataset.n_samples(cid)
        labels = subset.dataset.client(cid).y
        expected = sum(-(-3 * int((labels == c).sum()) // 10) for c in torch.unique(labels))
        assert all(len(index) == expected and int(index.max()) < n for index in chosen[cid])
        assert torch.equal(chosen[cid][0], chosen[cid][1])  # kept for `every` = 2 of its turns
        assert int(subset.store.get(cid)["coreset.turns"]) == 2  # type: ignore[index]  # chosen again in round 2
        weights = subset.store.get(cid)["coreset.weight"]  # type: ignore[index]
        assert int(weights.sum()) == n  # the subset stands for every sample
    samples_dense, samples_craig = dense.totals["samples"], subset.totals["samples"]
    assert samples_craig < 0.7 * samples_dense


def test_a_weighted_subset_steps_on_the_weighted_mean_loss(tmp_path: Path) -> None:
    """Weights w on the loss: one full-batch step is the step of the data with each sample repeated w times."""
    engine = _engine(tmp_path, "w", tiny_config(algorithm={"kind": "fedavg", "lr": 0.1, "batch_size": 64}))
    replica, data = engine.executor.replica, engine.dataset.client(0)
    x, y = data.x[:6], data.y[:6]
    weight = torch.tensor([1.0, 3.0, 1.0, 2.0, 1.0, 1.0])
    repeated = ClientData(x.repeat_interleave(weight.long(), 0), y.repeat_interleave(weight.long(), 0))
    start = replica.flat.clone()
    outs = []
    for part in (ClientData(x, y, weight), repeated):
        replica.load_(start)
        context = ClientContext(0, 0, start, 1.0, torch.Generator().manual_seed(0), None, engine.task, None)
        local_sgd(replica, part, engine.opt, context)
        outs.append(replica.flat.clone())
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-6)


def test_the_subset_survives_checkpoint_and_resume(tmp_path: Path) -> None:
    tree = _tree(rounds=5, state={"backend": "disk"}, checkpoint={"every": 2})
    whole = _engine(tmp_path, "whole", tree)
    whole.run()
    _engine(tmp_path, "cut", tree).run(after_round=lambda row: row.round == 2)
    _engine(tmp_path, "cut", tree, resume=True).run()
    assert torch.equal(final_weights(tmp_path / "cut"), final_weights(tmp_path / "whole"))


def test_fused_says_why_not_and_auto_falls_back(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"coreset\.kind=craig trains on a weighted subset"):
        _engine(tmp_path, "fused", _tree(executor={"kind": "fused", "clients": 3}))
    assert _engine(tmp_path, "auto", _tree(executor={"kind": "auto", "clients": 3})).executor_kind == "sequential"


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["coreset.kind=craig", "task.kind=regression"], "needs task.kind classification, not regression"),
        (["coreset.kind=craig", "coreset.fraction=0"], "coreset.fraction"),
        (["coreset.kind=craig", "coreset.every=0"], "coreset.every"),
        (["coreset.kind=craig", "executor.kind=fused"], "coreset.kind=craig trains on a weighted subset"),
    ],
)
def test_settings_that_cannot_work_are_one_line_and_exit_2(
    settings: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in refused(tmp_path, capsys, settings)


def test_the_random_baseline_draws_each_class_uniformly_and_weighs_it_whole() -> None:
    labels = torch.tensor([0] * 10 + [1] * 3 + [2] * 1)
    index, weight = stratified_subset(labels, 0.3, seed=7)
    picked = labels[index]
    assert [int((picked == c).sum()) for c in range(3)] == [3, 1, 1]  # ceil(0.3 n_c), at least one
    assert torch.equal(index, index.sort().values)
    torch.testing.assert_close(weight[picked == 0], torch.full((3,), 10 / 3))
    assert float(weight.sum()) == pytest.approx(14.0)
    again, _ = stratified_subset(labels, 0.3, seed=7)
    other = {tuple(stratified_subset(labels, 0.3, seed=s)[0].tolist()) for s in range(20)}
    assert torch.equal(again, index) and len(other) > 10  # the seed's draw, and the draws differ by seed
    counts = torch.zeros(10)  # uniform within a class: each of class 0's samples about 0.3 of 3,000 draws
    for s in range(3000):
        chosen = stratified_subset(labels, 0.3, seed=s)[0]
        counts += torch.bincount(chosen[chosen < 10], minlength=10)
    assert float((counts / 3000 - 0.3).abs().max()) < 0.04


def test_a_run_on_random_subsets_trains_on_fewer_samples_and_keeps_them(tmp_path: Path) -> None:
    engine = _engine(tmp_path, "random", _tree(coreset={"kind": "random", "fraction": 0.3, "every": 2}))
    engine.run()
    dense = _engine(tmp_path, "dense", {**_tree(), "coreset": {}})
    dense.run()
    assert engine.totals["samples"] < 0.7 * dense.totals["samples"]
    kept = [engine.store.get(cid) for cid in range(10)]
    assert any(state is not None and "coreset.index" in state for state in kept)
