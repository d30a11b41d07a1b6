"""The decentralised engine runs the federated engine's loop (fedsim.sim.run): a damaged node state file
stops it interrupted with the same one line and resumes from the newest intact checkpoint, and an early stop
reports the model it stopped with, evaluated, as the federated engine does."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from fedsim import RoundResult, Simulation
from fedsim.cli import main
from fedsim.runstore import RunStore
from fedsim.sim.persist import checkpoint
from fedsim.sim.persist.interrupted import RunInterrupted
from tests.conftest import tiny_config
from tests.gossip.test_gossip_rules import gossip_config
from tests.sim.test_state_damage import truncate


def _decentralised(**overrides: Any) -> dict[str, Any]:
    tree = gossip_config("dmsgd", threads=1, **overrides) | {"rounds": 6, "eval_every": 0}
    tree["checkpoint"] = {"every": 1, "keep": 10}
    tree["state"] = {"backend": "disk", "cache_mb": 0}  # every read from the file
    return tree


def _federated(**overrides: Any) -> dict[str, Any]:
    tree = tiny_config(rounds=6, clients_per_round=4, threads=1, data__clients=4, eval_every=0, **overrides)
    tree["algorithm"] = {"kind": "scaffold", "lr": 0.05, "batch_size": 16}
    tree["checkpoint"] = {"every": 1, "keep": 10}
    tree["state"] = {"backend": "disk", "cache_mb": 0}
    return tree


@pytest.mark.parametrize("engine", ["decentralised", "federated"])
def test_a_damaged_state_file_stops_either_engine_interrupted_and_the_resume_finishes(
    engine: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, db = tmp_path / "run", tmp_path / "runs.db"
    tree = _decentralised() if engine == "decentralised" else _federated()

    def damage(sim: Simulation, result: RoundResult) -> None:
        if result.round == 2:
            sim.engine.writer.wait()  # the round's checkpoint holds the intact file
            truncate(out / "state" / "client-2.safetensors")

    sim = Simulation(tree, out=out, db=db, callbacks=[damage])
    with pytest.raises(RunInterrupted) as stopped:
        sim.run()
    message = str(stopped.value)
    assert "\n" not in message and f"{out / 'state' / 'client-2.safetensors'}" in message
    newest = checkpoint.complete(out / "checkpoints")[-1]
    assert f"newest intact checkpoint {newest}: `fedsim resume {out}`" in message
    with RunStore.open_readonly(db) as store:
        assert [r.status for r in store.list_runs()] == ["interrupted"]
    assert main(["resume", str(out), "--db", str(db)]) == 0, capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text())["rounds"] == 6


@pytest.mark.parametrize("engine", ["decentralised", "federated"])
def test_an_early_stop_reports_the_model_it_stopped_with_on_either_engine(engine: str, tmp_path: Path) -> None:
    tree = _decentralised() if engine == "decentralised" else _federated()
    tree["state"] = {"backend": "memory"}
    sim = Simulation(tree, out=tmp_path / "run", db=tmp_path / "runs.db", callbacks=[lambda s, r: r.round == 2])
    summary = sim.run()
    assert summary.rounds == 2 and sim.engine.stopped
    assert math.isfinite(summary.final_accuracy)  # eval_every 0: evaluated once, when it stopped
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["final_accuracy"] == pytest.approx(summary.final_accuracy) and saved["rounds"] == 2
    assert saved["stages"][0]["stage"] == "train"
    with RunStore.open_readonly(tmp_path / "runs.db") as store:
        (run,) = store.list_runs()
    assert run.status == "finished" and run.rounds_done == 2
