"""A server stage of your own that raises, and a factory module that exits on import: one line, never a
traceback. Built or imported: refused before anything is written, exit 2. Mid-round: the run is marked failed
and ``fedsim run`` exits 1 (the input was good; code it ran failed it), naming the stage, the round and the
error; from Python, :class:`fedsim.RunFailed` with the stage's own exception as its cause."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Literal

import pytest
import yaml

from fedsim import RunFailed, Simulation
from fedsim.cli import main
from fedsim.config import ConfigError, ServerStageConfig, register_server_stage
from fedsim.sim.server_stages import ServerView, StageContext, Stateless
from tests.conftest import refused, tiny_config


class RaisingConfig(ServerStageConfig):
    kind: Literal["raising_stage"] = "raising_stage"
    raise_in: Literal["init", "apply_"] = "apply_"
    round: int = 1  # the 0-based round whose apply_ raises


@register_server_stage(RaisingConfig)
class Raising(Stateless):
    def __init__(self, cfg: RaisingConfig, context: StageContext) -> None:
        if cfg.raise_in == "init":
            raise RuntimeError("no table for\n    the reputations")  # a message of two lines
        self.cfg = cfg

    def apply_(self, view: ServerView) -> bool:
        if view.round == self.cfg.round:
            raise ValueError("scores went NaN")
        return False


def _statuses(db: Path) -> list[str]:
    with sqlite3.connect(db) as raw:
        return [status for (status,) in raw.execute("SELECT status FROM runs")]


def test_a_stage_raising_as_it_is_built_is_one_line_exit_2_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(tmp_path, capsys, ["rounds=3", "server_stages=[{kind: raising_stage, raise_in: init}]"])
    assert err == (
        "fedsim: error: server_stages: raising_stage: building it raised RuntimeError: no table for the reputations\n"
    )


def test_a_stage_raising_mid_round_fails_the_run_in_one_line_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config, out, db = tmp_path / "run.yaml", tmp_path / "out", tmp_path / "runs.db"
    config.write_text(yaml.safe_dump(tiny_config(server_stages=[{"kind": "raising_stage", "round": 1}])))
    code = main(["run", str(config), "--set", "checkpoint.every=1", "--out", str(out), "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 1, err
    assert err == (
        "fedsim: error: server_stages: raising_stage's apply_ in round 2 raised ValueError: scores went NaN; the run"
        f" is marked failed; the newest checkpoint {out / 'checkpoints' / 'ckpt-000000'} is intact: `fedsim resume"
        f" {out}` once that is fixed\n"
    )
    assert _statuses(db) == ["failed"] and not (out / "summary.json").exists()


def test_from_python_a_stage_raising_mid_round_is_run_failed_with_its_cause(tmp_path: Path) -> None:
    out, db = tmp_path / "out", tmp_path / "runs.db"
    sim = Simulation(tiny_config(server_stages=[{"kind": "raising_stage", "round": 0}]), out=out, db=db)
    with pytest.raises(RunFailed) as failed:
        sim.run()
    assert str(failed.value) == "server_stages: raising_stage's apply_ in round 1 raised ValueError: scores went NaN"
    assert isinstance(failed.value.__cause__, ValueError) and _statuses(db) == ["failed"]
    with pytest.raises(ConfigError, match=r"^server_stages: raising_stage: building it raised RuntimeError"):
        Simulation(tiny_config(server_stages=[{"kind": "raising_stage", "raise_in": "init"}]), out=tmp_path / "o2")
    assert not (tmp_path / "o2").exists()


@pytest.mark.parametrize(("code", "shown"), [("0", "sys.exit(0)"), ("'usage: stage.py DIR'", "sys.exit('usage")])
def test_a_factory_module_exiting_on_import_is_one_line_exit_2(
    code: str, shown: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = tmp_path / "inputs" / f"exits_{len(code)}.py"
    module.parent.mkdir()
    module.write_text(f"import sys\n\nsys.exit({code})\n")
    err = refused(tmp_path, capsys, ["rounds=3", f"server_stages=[{{factory: '{module}:Stage'}}]"])
    assert err.startswith(f"fedsim: error: server_stages.factory: '{module.stem}' exited on import ({shown}"), err
    assert "if __name__ == '__main__':" in err
