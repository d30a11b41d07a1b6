"""``checkpoint.every: auto`` (the default): the period chosen from a checkpoint's measured cost against a round's
(CheckFreq), stated in summary.json, and a run SIGKILLed on it resumes to the uninterrupted weights."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from fedsim.api.launch import final_weights
from fedsim.config import CheckpointConfig, ConfigError, parse_config
from fedsim.sim.persist.period import choose_period
from tests.conftest import killed_once_saved, tiny_config


@pytest.mark.parametrize(
    ("cost_s", "round_s", "bounds", "expected"),
    [
        (0.1, 1.0, {}, (5, "max_share")),  # 0.1 s in 5 rounds of 1 s: 2%
        (0.1, 1.0, {"max_share": 0.1}, (1, "max_share")),
        (0.001, 0.5, {}, (1, "max_share")),  # cheaper than 2% of one round: every round
        (0.1, 1.0, {"max_interval_s": 3.0}, (3, "max_interval_s")),  # 2% would lose 5 s to a crash; 3 s wins
        (60.0, 1000.0, {}, (1, "max_interval_s")),  # a round longer than the interval: every round
        (0.0, 0.0, {}, (1, "max_share")),  # nothing measured: every round, no division by zero
    ],
)
def test_the_period_keeps_checkpoints_under_the_share_and_within_the_interval(
    cost_s: float, round_s: float, bounds: dict[str, float], expected: tuple[int, str]
) -> None:
    choice = choose_period(cost_s, round_s, CheckpointConfig(**bounds))
    assert (choice.period, choice.bound) == expected


def test_every_is_auto_by_default_and_old_settings_still_load() -> None:
    assert parse_config(tiny_config()).checkpoint.every == "auto"
    assert parse_config(tiny_config(checkpoint={"every": 0})).checkpoint.fixed == 0
    saved = {"every": 5, "keep": 2, "max_share": 0.02, "max_interval_s": 300.0}  # as config.json holds it
    assert parse_config(tiny_config(checkpoint=saved)).checkpoint.fixed == 5


@pytest.mark.parametrize(
    ("checkpoint", "words"),
    [
        ({"every": -1}, "checkpoint.every: must be auto, or a whole number of rounds >= 0"),
        ({"every": "often"}, "checkpoint.every: must be auto, or a whole number of rounds >= 0"),
        ({"every": 5, "max_share": 0.1}, "checkpoint.max_share bounds the period that every: auto chooses"),
        ({"max_share": 0}, "checkpoint.max_share: Input should be greater than 0"),
        ({"max_interval_s": -1}, "checkpoint.max_interval_s: Input should be greater than 0"),
    ],
)
def test_a_bad_checkpoint_setting_is_one_line_naming_it(checkpoint: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        parse_config(tiny_config(checkpoint=checkpoint))


def _fedsim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fedsim.cli", *args], capture_output=True, text=True, check=False)


def test_summary_states_the_period_auto_chose_and_what_from(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tiny_config(rounds=8)))
    done = _fedsim("run", str(config), "--out", str(tmp_path / "out"), "--db", str(tmp_path / "fedsim.db"))
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "out" / "summary.json").read_text())["checkpoint"]
    assert record["every"] == "auto" and record["unable"] is None
    assert (record["max_share"], record["max_interval_s"]) == (0.02, 300.0)
    chosen = choose_period(record["cost_s"], record["round_s"], CheckpointConfig())
    assert (record["period"], record["bound"]) == (chosen.period, chosen.bound)  # as measured, so chosen
    assert list((tmp_path / "out" / "checkpoints").glob("ckpt-*")), "auto took no checkpoint"


def test_an_integer_every_is_the_period_summary_states(tmp_path: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tiny_config(rounds=4, checkpoint={"every": 2})))
    assert _fedsim("run", str(config), "--out", str(tmp_path / "out"), "--db", str(tmp_path / "db")).returncode == 0
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["checkpoint"] == {"every": 2, "period": 2}


@pytest.mark.slow
def test_a_run_killed_on_auto_checkpoints_resumes_to_the_uninterrupted_weights(tmp_path: Path) -> None:
    # a wall-time bound far under a round: auto checkpoints after every round from the second on
    auto = {"every": "auto", "max_interval_s": 0.001, "keep": 50}
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tiny_config(rounds=40, eval_every=5, threads=1, checkpoint=auto)))
    db = str(tmp_path / "fedsim.db")
    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    assert _fedsim("run", str(config), "--out", str(straight), "--db", db).returncode == 0
    run = [sys.executable, "-m", "fedsim.cli", "run", str(config), "--out", str(crashed), "--db", db]
    killed_once_saved(run, crashed / "checkpoints" / "ckpt-000005")  # the 5th automatic one
    assert not (crashed / "summary.json").exists()

    again = _fedsim("run", str(config), "--out", str(crashed), "--db", db)  # the same --out: resume is the way
    assert again.returncode == 2 and f"`fedsim resume {crashed}` to go on" in again.stderr

    resumed = _fedsim("resume", str(crashed), "--db", db)
    assert resumed.returncode == 0, resumed.stderr
    assert torch.equal(final_weights(crashed), final_weights(straight))
    record = json.loads((crashed / "summary.json").read_text())["checkpoint"]
    assert (record["period"], record["bound"]) == (1, "max_interval_s")
