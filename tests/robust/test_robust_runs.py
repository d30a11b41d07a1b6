"""Robust aggregation in whole runs: what reproduces FedAvg, 1 and 2 ranks and both executors agreeing, server
optimisers over the robust aggregate, a resumed centre, a round too small for its rule, and the refusals."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim.api.launch import final_weights
from fedsim.config import ConfigError, parse_config
from fedsim.sim.rounds.engine import Engine
from tests.conftest import on_one_and_two_ranks, refused, summed_row_norms, tiny_config

MLP = {"kind": "mlp", "hidden": [16]}


def _engine(tmp_path: Path, name: str, **overrides: Any) -> Engine:
    out = tmp_path / name
    tree = tiny_config(**{"clients_per_round": 7, "data__clients": 12, "model": MLP, **overrides})
    return Engine(parse_config(tree), out_dir=out, db_path=out / "runs.db")


def _run(tmp_path: Path, name: str, **overrides: Any) -> torch.Tensor:
    engine = _engine(tmp_path, name, **overrides)
    engine.run()
    return engine.global_state


def test_trimmed_mean_at_trim_0_is_the_mean_weighted_or_not_and_median_of_two_clients_too(tmp_path: Path) -> None:
    fedavg = _run(tmp_path, "mean")
    weighted = _run(tmp_path, "trimmed", aggregator={"kind": "trimmed_mean", "trim": 0.0, "weighted": True})
    torch.testing.assert_close(weighted, fedavg, rtol=0, atol=2e-6)
    uniform = {"kind": "fedavg", "lr": 0.1, "batch_size": 16, "weighting": "uniform"}
    plain = _run(tmp_path, "plain-mean", algorithm=uniform)  # the paper's trimmed mean at trim 0: the plain mean
    trimmed = _run(tmp_path, "plain-trimmed", aggregator={"kind": "trimmed_mean", "trim": 0.0})
    torch.testing.assert_close(trimmed, plain, rtol=0, atol=2e-6)
    pair = _run(tmp_path, "pair-mean", clients_per_round=2, algorithm=uniform)
    median = _run(tmp_path, "pair-median", clients_per_round=2, algorithm=uniform, aggregator={"kind": "median"})
    torch.testing.assert_close(median, pair, rtol=0, atol=2e-6)  # the median of two is their mean
    krum = _run(tmp_path, "krum", aggregator={"kind": "multi_krum", "byzantine": 2})
    assert float((krum - fedavg).abs().max()) > 1e-3  # a rule that is not the mean moves elsewhere


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["median", "bulyan", "geometric_median"])
def test_one_and_two_ranks_and_both_executors_give_the_same_aggregate(tmp_path: Path, kind: str) -> None:
    aggregator = {"kind": kind, **({"byzantine": 1} if kind == "bulyan" else {})}
    tree = tiny_config(model=MLP, clients_per_round=7, data__clients=12, aggregator=aggregator)
    one, two = on_one_and_two_ranks(tree, tmp_path)
    torch.testing.assert_close(two, one, rtol=0, atol=2e-5)
    fused = _run(tmp_path, "fused", aggregator=aggregator, executor={"kind": "fused", "clients": 3})
    sequential = _run(tmp_path, "sequential", aggregator=aggregator, executor={"kind": "sequential"})
    torch.testing.assert_close(fused, sequential, rtol=0, atol=2e-5)


def test_a_small_memory_budget_spills_and_gives_the_same_run(tmp_path: Path) -> None:
    aggregator = {"kind": "multi_krum", "byzantine": 1}
    in_memory = _run(tmp_path, "memory", aggregator=aggregator)
    spilled = _run(tmp_path, "spilled", aggregator={**aggregator, "memory_mb": 0.0005})  # 524 bytes: spilled
    torch.testing.assert_close(spilled, in_memory, rtol=0, atol=1e-6)
    assert not list((tmp_path / "spilled").glob("gathered-*"))  # the mapped file left nothing behind


def test_server_optimisers_apply_to_the_robust_aggregate(tmp_path: Path) -> None:
    adam = {"server_optimizer": {"kind": "fedadam", "lr": 0.05}}
    plain = _run(tmp_path, "adam", **adam)
    weighted = {"kind": "trimmed_mean", "trim": 0.0, "weighted": True}  # FedAvg's weighted mean
    trimmed = _run(tmp_path, "adam-trimmed", **adam, aggregator=weighted)
    torch.testing.assert_close(trimmed, plain, rtol=0, atol=2e-6)
    robust = _run(tmp_path, "adam-median", **adam, aggregator={"kind": "median"})
    assert float((robust - plain).abs().max()) > 1e-4


def test_a_resumed_centered_clip_goes_on_from_its_centre(tmp_path: Path) -> None:
    tree: dict[str, Any] = {
        "rounds": 4,
        "aggregator": {"kind": "centered_clip", "radius": 0.05},
        "checkpoint": {"every": 2},
    }
    whole = _engine(tmp_path, "whole", **tree)
    whole.run()
    cut = _engine(tmp_path, "cut", **tree)
    cut.run(after_round=lambda row: row.round == 1)
    full = {**tiny_config(clients_per_round=7, data__clients=12, model=MLP), **tree}
    resumed = Engine(parse_config(full), tmp_path / "cut", tmp_path / "cut" / "runs.db", resume=True)
    assert resumed.robust is not None and float(resumed.robust.tensors()["robust.centre"].abs().max()) > 0
    resumed.run()
    torch.testing.assert_close(final_weights(tmp_path / "cut"), final_weights(tmp_path / "whole"))


def test_a_round_too_small_for_its_rule_keeps_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    aggregator = {"kind": "bulyan", "byzantine": 1}  # needs 7 updates; dropout leaves fewer
    engine = _engine(tmp_path, "small", rounds=1, aggregator=aggregator, emulation={"dropout": 0.4})
    before = engine.global_state.clone()
    engine.run()
    assert torch.equal(engine.global_state, before)
    summary = json.loads((tmp_path / "small" / "summary.json").read_text())
    (failure,) = summary["aggregator"]["failed_rounds"]
    assert failure["round"] == 0 and failure["reason"].endswith("bulyan with byzantine=1 needs 7")
    assert "round 0: not aggregated, the model stays" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["aggregator.kind=krum", "aggregator.byzantine=24"], "needs 51 or more clients a round (n >= 2f + 3)"),
        (["aggregator.kind=bulyan", "aggregator.byzantine=12"], "needs 51 or more clients a round (n >= 4f + 3)"),
        (["aggregator.kind=trimmed_mean", "aggregator.trim=0.5"], "aggregator.trim"),
        (
            [
                "aggregator.kind=median",
                "secagg.kind=secagg_plus",
                "secagg.num_shares=5",
                "secagg.reconstruction_threshold=3",
            ],
            "secagg hides",
        ),
        (["aggregator.kind=median", "privacy.kind=central", "privacy.clip=1", "privacy.noise_multiplier=1"], "privacy"),
        (["aggregator.kind=multi_krum", "aggregator.selected=80"], "selected=80 exceeds the cohort"),
        (["aggregator.kind=geometric_median", "aggregator.smoothing=nan"], "aggregator.smoothing"),
        (["aggregator.kind=average"], "aggregator.kind"),
    ],
)
def test_impossible_aggregator_settings_are_one_line_and_exit_2(
    tmp_path: Path, settings: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in refused(tmp_path, capsys, settings)


def test_an_algorithm_summing_more_than_one_update_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"aggregator\.kind=median: algorithm scaffold sums"):
        _engine(tmp_path, "scaffold", algorithm={"kind": "scaffold", "lr": 0.1}, aggregator={"kind": "median"})


def test_a_norm_bound_under_error_feedback_bounds_the_decoded_messages_the_server_sums(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound is the server's: it applies to what top-k with error feedback decodes, residual included."""
    norms = summed_row_norms(monkeypatch)
    tree = tiny_config(
        rounds=4,
        clients_per_round=10,
        model={"kind": "mlp", "hidden": [16]},
        uplink={"kind": "topk", "fraction": 0.3},
        aggregator={"kind": "norm_bound", "bound": 0.05},
    )
    Engine(parse_config(tree), out_dir=tmp_path / "out", db_path=tmp_path / "runs.db").run()
    assert len(norms) == 40 and max(norms) <= 0.05 * (1 + 1e-5), max(norms)
