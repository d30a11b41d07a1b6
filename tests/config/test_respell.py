"""Old spellings load as today's with one note: ``algorithm.name`` is ``algorithm.kind``, as in every section."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from fedsim.config import ConfigError, SpellingNote, load_config, parse_config
from tests.conftest import QUICKSTART, tiny_config


def test_algorithm_name_loads_as_kind_with_a_note() -> None:
    old = tiny_config(algorithm={"name": "fedprox", "mu": 0.1, "lr": 0.2})
    with pytest.warns(SpellingNote, match=r"^algorithm\.name=fedprox is spelled algorithm\.kind now$"):
        cfg = parse_config(old)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # today's spelling: no note
        assert parse_config(tiny_config(algorithm={"kind": "fedprox", "mu": 0.1, "lr": 0.2})) == cfg
    assert cfg.algorithm.kind == "fedprox" and cfg.model_dump(mode="json")["algorithm"]["kind"] == "fedprox"
    assert "name" not in cfg.model_dump(mode="json")["algorithm"]  # config.json is written in today's spelling


def test_name_and_kind_together_in_a_file_is_one_error() -> None:
    with pytest.raises(ConfigError, match=r"algorithm\.name and algorithm\.kind are one setting"):
        parse_config(tiny_config(algorithm={"name": "fedprox", "kind": "fedavg"}))


def test_an_old_override_wins_over_the_files_kind() -> None:
    with pytest.warns(SpellingNote, match=r"algorithm\.name=scaffold is spelled algorithm\.kind now"):
        cfg = load_config(QUICKSTART, ["algorithm.name=scaffold"])
    assert cfg.algorithm.kind == "scaffold"


def test_fedsim_run_of_an_old_file_prints_one_note_and_runs(tmp_path: Path) -> None:
    tree = tiny_config(rounds=1, algorithm={"name": "fedavg", "lr": 0.1})
    config = tmp_path / "old.yaml"
    config.write_text(json.dumps(tree))  # JSON is YAML
    out, db = str(tmp_path / "out"), str(tmp_path / "runs.db")
    done = subprocess.run(
        [sys.executable, "-m", "fedsim.cli", "run", str(config), "--out", out, "--db", db],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "note:" in line]
    assert notes == ["fedsim: note: algorithm.name=fedavg is spelled algorithm.kind now"]
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert saved["algorithm"]["kind"] == "fedavg" and "name" not in saved["algorithm"]
