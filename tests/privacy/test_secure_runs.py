"""Runs under SecAgg+ end to end: from the command line, against the plain run, with dropouts the protocol
survives and ones it does not, on either executor and two ranks, beside DP, and the settings it refuses."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim.api.launch import final_weights
from fedsim.cli import main
from fedsim.config import ConfigError, parse_config
from fedsim.privacy.secagg import quantize
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from tests.conftest import QUICKSTART, on_one_and_two_ranks, refused, tiny_config

SECAGG = {"kind": "secagg_plus", "num_shares": 5, "reconstruction_threshold": 3}
MLP = {"kind": "mlp", "hidden": [16]}


def _engine(tmp_path: Path, name: str, **overrides: Any) -> Engine:
    out = tmp_path / name
    tree = tiny_config(**{"clients_per_round": 8, "data__clients": 16, "model": MLP, **overrides})
    return Engine(parse_config(tree), out_dir=out, db_path=out / "runs.db")


def _round_metrics(out: Path) -> list[dict[str, Any]]:
    with RunStore.open_readonly(out / "runs.db") as store:
        (run,) = store.list_runs()
        return [json.loads(r.metrics_json) for r in store.rounds(run.run_id)]


def _bound(engine: Engine, clients: int) -> float:
    """How far one round's mean update may move under quantization: a step per client, over the weights."""
    secagg = engine.secagg
    assert secagg is not None
    weights = [engine.dataset.n_samples(c) for c in range(engine.dataset.num_clients)]
    least = sum(sorted(weights)[:clients])
    return clients * 2 * secagg.cfg.clipping_range / secagg.levels * secagg.max_weight / least * 1.01


def test_the_quickstart_runs_under_secagg_from_the_command_line(tmp_path: Path) -> None:
    out = tmp_path / "q"
    settings = ("secagg.kind=secagg_plus", "secagg.num_shares=5", "secagg.reconstruction_threshold=3", "rounds=2")
    args = [part for setting in settings for part in ("--set", setting)]
    main(["run", str(QUICKSTART), *args, "--out", str(out), "--db", str(tmp_path / "runs.db")])
    secagg = json.loads((out / "summary.json").read_text())["secagg"]
    assert (secagg["num_shares"], secagg["reconstruction_threshold"], secagg["modulus_range"]) == (5, 3, 2**32)
    assert secagg["failed_rounds"] == [] and 0 < secagg["quantization_error"] < 0.05
    # the masked vector of the quickstart's CNN at 4 bytes an entry, and keys, shares and ids beside it
    assert secagg["bytes_up_per_client"] > 4 * 6_000


def test_one_round_under_secagg_lands_within_the_quantization_error_of_the_plain_round(tmp_path: Path) -> None:
    plain = _engine(tmp_path, "plain", rounds=1)
    plain.run()
    secure = _engine(tmp_path, "secure", rounds=1, secagg=SECAGG)
    secure.run()
    diff = (secure.global_state - plain.global_state).abs().max()
    assert 0 < float(diff) <= _bound(secure, 8)
    (metrics,) = _round_metrics(tmp_path / "secure")
    assert metrics["secagg_failed"] == 0.0 and 0 < metrics["secagg_quantization_error"] < 0.05
    assert metrics["secagg_up_bytes"] > 4 * secure.global_state.numel()
    plain_row, secure_row = _round_metrics(tmp_path / "plain"), metrics
    assert "secagg_up_bytes" not in plain_row[0] and secure_row["cohort"] == 8


def test_dropouts_the_threshold_tolerates_aggregate_the_survivors(tmp_path: Path) -> None:
    emulation = {"dropout": 0.25}
    plain = _engine(tmp_path, "plain", rounds=1, emulation=emulation)
    plain.run()
    secagg = {
        "kind": "secagg_plus",
        "num_shares": 7,
        "reconstruction_threshold": 3,
    }  # 4 of 8 may drop: every 7 of 8 keeps 3
    secure = _engine(tmp_path, "secure", rounds=1, emulation=emulation, secagg=secagg)
    secure.run()
    (metrics,) = _round_metrics(tmp_path / "secure")
    assert metrics["dropped"] >= 2 and metrics["secagg_failed"] == 0.0
    assert float((secure.global_state - plain.global_state).abs().max()) <= _bound(secure, 8)


def test_beyond_the_tolerated_dropouts_the_round_fails_and_the_model_stays(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = _engine(tmp_path, "fail", rounds=1, emulation={"dropout": 0.25}, secagg=SECAGG)  # 4 of 8 drop
    before = engine.global_state.clone()
    engine.run()
    assert torch.equal(engine.global_state, before)
    (metrics,) = _round_metrics(tmp_path / "fail")
    assert metrics["secagg_failed"] == 1.0 and metrics["secagg_quantization_error"] is None
    summary = json.loads((tmp_path / "fail" / "summary.json").read_text())
    (failure,) = summary["secagg"]["failed_rounds"]
    assert failure["round"] == 0 and "fewer than reconstruction_threshold=3" in failure["reason"]
    assert failure["reason"].endswith("(4 of 8 clients dropped out)")
    assert f"round 0: SecAgg+ failed, the model stays: {failure['reason']}" in capsys.readouterr().err


@pytest.mark.slow
def test_the_fused_executor_and_two_ranks_aggregate_as_the_sequential_one(tmp_path: Path) -> None:
    runs = {}
    for kind in ("sequential", "fused"):
        engine = _engine(tmp_path, kind, rounds=2, secagg=SECAGG, executor={"kind": kind, "clients": 3})
        engine.run()
        runs[kind] = engine
    bound = _bound(runs["fused"], 8)
    assert float((runs["fused"].global_state - runs["sequential"].global_state).abs().max()) <= bound
    tree = tiny_config(model=MLP, clients_per_round=8, data__clients=16, secagg=SECAGG)
    one, two = on_one_and_two_ranks(tree, tmp_path)
    torch.testing.assert_close(two, one, rtol=0, atol=2e-5)


def test_secagg_beside_central_dp_aggregates_the_clipped_noised_sum(tmp_path: Path) -> None:
    privacy = {"kind": "central", "clip": 0.5, "noise_multiplier": 1.0, "delta": 1e-5}
    plain = _engine(tmp_path, "dp", rounds=1, privacy=privacy)
    plain.run()
    secure = _engine(tmp_path, "dp-secure", rounds=1, privacy=privacy, secagg=SECAGG)
    secure.run()
    summary = json.loads((tmp_path / "dp-secure" / "summary.json").read_text())
    assert summary["secagg"]["max_weight"] == 1.0  # DP weighs every client 1: no precision lost to weights
    assert summary["privacy"]["epsilon"] > 0
    step = 8 * 2 * 8.0 / 2**22  # 8 clients, a step each, over the fixed denominator of 8 clients
    # the same noise draws, for clip + the rounding's reach (sqrt(d) steps) instead of the clip, over 8 clients:
    # under 6 standard deviations each, in 1,210 draws
    reach = math.sqrt(secure.global_state.numel()) * 2 * 8.0 / 2**22
    assert summary["privacy"]["sensitivity_slack"] == pytest.approx(reach)
    assert float((secure.global_state - plain.global_state).abs().max()) <= step + 6 * 1.0 * reach / 8


def test_a_shrinking_adaptive_clip_under_secagg_is_noised_at_its_true_sensitivity(tmp_path: Path) -> None:
    """SecAgg+'s stochastic rounding moves a message by up to one step 2c/Q a value, a fixed reach past the
    clip however small the adaptive clip gets: the central noise covers clip + that reach at every clip."""
    privacy = {"kind": "central", "clip": 50.0, "noise_multiplier": 1.0, "delta": 1e-5}
    privacy |= {"adaptive": {"target_quantile": 0.01, "lr": 10.0}}
    engine = _engine(tmp_path, "shrink", rounds=6, privacy=privacy, secagg=SECAGG, algorithm__lr=1e-5)
    engine.run()
    dp, numel = engine.privacy, engine.global_state.numel()
    assert dp is not None
    reach = math.sqrt(numel) * 2 * 8.0 / 2**22  # sqrt(d) steps of 2c/Q, c = clipping_range 8, Q = 2**22
    summary = json.loads((tmp_path / "shrink" / "summary.json").read_text())["privacy"]
    assert summary["sensitivity_slack"] == pytest.approx(reach, rel=1e-12)
    clips = [m["clip"] for m in _round_metrics(tmp_path / "shrink")]
    assert clips[-1] < reach < 1e-3 * 50.0  # allowed at the initial clip; past the clip in force by the end
    # a message at the clip in force, dequantized, reaches past it: by more than 40% here, never past the reach
    message = torch.full((numel,), clips[-1] / math.sqrt(numel), dtype=torch.float64)
    generator = torch.Generator().manual_seed(0)
    levels = quantize(message, torch.tensor(1.0, dtype=torch.float64), 8.0, 2**22, generator)
    dequantized = levels.double() * (2 * 8.0 / 2**22) - 8.0
    assert 1.4 * clips[-1] < float(dequantized.norm()) <= clips[-1] + reach
    sums = {"delta": torch.zeros(200_000), "weight": torch.zeros(1), "unclipped": torch.zeros(1)}
    clip = dp.clip
    dp.release_(sums, 99)
    expected = dp.update_noise * (clip + reach)  # the whole cohort's noise: noise_cohort is the cohort
    assert float(sums["delta"].std()) == pytest.approx(expected, rel=0.01)


def test_a_weight_above_max_weight_is_warned_about_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _engine(tmp_path, "heavy", rounds=2, secagg={**SECAGG, "max_weight": 1.0}).run()  # clients weigh their samples
    err = capsys.readouterr().err
    assert err.count("a client weighs more than secagg.max_weight=1") == 1, err


def test_a_resumed_run_counts_secaggs_bytes_and_failures_from_the_start(tmp_path: Path) -> None:
    tree: dict[str, Any] = {"rounds": 4, "secagg": SECAGG, "checkpoint": {"every": 2}, "emulation": {"dropout": 0.25}}
    whole = _engine(tmp_path, "whole", **tree)
    whole.run()
    cut = _engine(tmp_path, "cut", **tree)
    cut.run(after_round=lambda row: row.round == 1)
    full = {**tiny_config(clients_per_round=8, data__clients=16, model=MLP), **tree}
    Engine(parse_config(full), tmp_path / "cut", tmp_path / "cut" / "runs.db", resume=True).run()
    summaries = [json.loads((tmp_path / n / "summary.json").read_text())["secagg"] for n in ("whole", "cut")]
    assert summaries[0]["failed_rounds"] and summaries[0]["failed_rounds"][0]["round"] == 0  # round 0 failed
    assert summaries[1] == summaries[0]
    torch.testing.assert_close(final_weights(tmp_path / "cut"), final_weights(tmp_path / "whole"))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            ["secagg.kind=secagg_plus", "secagg.num_shares=5", "secagg.reconstruction_threshold=6"],
            "must be between 2 and num_shares=5",
        ),
        (
            ["secagg.kind=secagg_plus", "secagg.num_shares=2", "secagg.reconstruction_threshold=2"],
            "secagg.num_shares must be at least 3",
        ),
        (["secagg.reconstruction_threshold=3"], "secagg.reconstruction_threshold is set but secagg.kind is none"),
        (
            [
                "secagg.kind=secagg_plus",
                "secagg.num_shares=5",
                "secagg.reconstruction_threshold=3",
                "secagg.modulus_range=1000000",
            ],
            "power of 2",
        ),
        (
            [
                "secagg.kind=secagg_plus",
                "secagg.num_shares=5",
                "secagg.reconstruction_threshold=3",
                "secagg.modulus_range=4194304",
            ],
            "larger than",
        ),
        (
            [
                "secagg.kind=secagg_plus",
                "secagg.num_shares=5",
                "secagg.reconstruction_threshold=3",
                "secagg.modulus_range=67108864",
            ],
            "overflows",
        ),
        (
            [
                "secagg.kind=secagg_plus",
                "secagg.num_shares=5",
                "secagg.reconstruction_threshold=3",
                "secagg.clipping_range=nan",
            ],
            "clipping_range",
        ),
        (
            ["secagg.kind=secagg_plus", "secagg.num_shares=60", "secagg.reconstruction_threshold=55"],
            "exceeds the cohort (50 clients)",
        ),
        (
            [
                "secagg.kind=secagg_plus",
                "secagg.num_shares=5",
                "secagg.reconstruction_threshold=3",
                "control.kind=none",
                "control.knob.name=topk",
            ],
            "topk",
        ),
    ],
)
def test_impossible_secagg_settings_are_one_line_and_exit_2(
    tmp_path: Path, settings: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in refused(tmp_path, capsys, settings)


@pytest.mark.parametrize("name", ["scaffold", "fednova"])
def test_an_algorithm_summing_more_than_one_update_is_refused_under_secagg(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match=f"secagg: algorithm {name} sums .* not one model update per client"):
        _engine(tmp_path, name, algorithm={"kind": name, "lr": 0.1}, secagg=SECAGG)
