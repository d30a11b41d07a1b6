"""A diverged model is said plainly: the run ends with status ``diverged`` in the run store (read with
sqlite3), one line naming the round and the clients whose training loss was not finite, exit code 3, and no
summary.json or model.safetensors that would pass for a finished run's. A stage that writes NaN into the model
is caught the same way; under DP the clients are not named."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import ClassVar, Literal

import pytest
import torch
import yaml

from fedsim.cli import main
from fedsim.config import ServerStageConfig, parse_config, register_server_stage
from fedsim.sim.persist.diverged import Diverged
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.server_stages import ServerView, StageContext, Stateless
from tests.conftest import tiny_config

MLP = {"kind": "mlp", "hidden": [32]}  # a ReLU network's activations overflow at a huge learning rate


class PoisonConfig(ServerStageConfig):
    kind: Literal["poison_model"] = "poison_model"
    at: Literal["after_update"] = "after_update"
    reads_records: ClassVar[bool] = False
    round: int = 1


@register_server_stage(PoisonConfig)
class Poison(Stateless):
    """Writes one NaN into the new model in its round."""

    def __init__(self, cfg: PoisonConfig, context: StageContext) -> None:
        self.cfg = cfg

    def apply_(self, view: ServerView) -> bool:
        if view.round == self.cfg.round:
            view.model[0] = float("nan")
        return False


def _status(db: Path) -> list[tuple[str, int]]:
    with sqlite3.connect(db) as con:
        return con.execute(
            "SELECT r.status, (SELECT COUNT(*) FROM rounds d WHERE d.run_id = r.run_id) FROM runs r"
        ).fetchall()


def test_a_huge_learning_rate_ends_the_run_diverged_with_one_line_and_exit_3(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tiny_config(rounds=3, model=MLP)))
    out, db = tmp_path / "out", tmp_path / "runs.db"
    code = main(["run", str(config), "--out", str(out), "--db", str(db), "--set", "algorithm.lr=1e30"])
    assert code == 3
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fedsim:")]
    assert len(err) == 1 and "the model diverged in round 1" in err[0], err
    assert "training loss not finite at client(s)" in err[0]
    assert _status(db) == [("diverged", 0)]  # the round that diverged is not written as a finished one
    assert not (out / "summary.json").exists() and not (out / "model.safetensors").exists()


def test_a_stage_that_writes_nan_into_the_model_is_caught_in_its_round(tmp_path: Path) -> None:
    tree = tiny_config(rounds=4, server_stages=[{"kind": "poison_model", "round": 2}])
    engine = Engine(parse_config(tree), out_dir=tmp_path / "out", db_path=tmp_path / "runs.db")
    with pytest.raises(Diverged, match=r"diverged in round 3 .*every client's training loss was finite") as caught:
        engine.run()
    assert caught.value.round == 2 and caught.value.clients == []
    assert _status(tmp_path / "runs.db") == [("diverged", 2)]  # rounds 1 and 2 stay in the store


def test_under_dp_the_round_is_named_and_the_clients_are_not(tmp_path: Path) -> None:
    privacy = {"kind": "central", "clip": 1.0, "noise_multiplier": 1.0}
    tree = tiny_config(rounds=3, privacy=privacy, model=MLP, algorithm={"kind": "fedavg", "lr": 1e30, "batch_size": 16})
    engine = Engine(parse_config(tree), out_dir=tmp_path / "out", db_path=tmp_path / "runs.db")
    with pytest.raises(Diverged, match="the clients are not named under DP") as caught:
        engine.run()
    assert caught.value.clients is None
    assert not torch.isfinite(engine.global_state).all()
