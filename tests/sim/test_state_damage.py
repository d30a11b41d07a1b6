"""A client's live state file damaged while the run goes on: the run stops, marked interrupted, with one line
naming the file and the command that resumes from the newest intact checkpoint; or, with
``state.on_damage: reset``, the client starts again from fresh state, counted in the run store."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from fedsim import RoundResult, Simulation
from fedsim.cli import main
from fedsim.runstore import RunStore
from fedsim.sim.persist import checkpoint
from fedsim.sim.persist.interrupted import RunInterrupted
from fedsim.sim.state.state_files import StateDamaged, read_state
from tests.conftest import tiny_config


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-40])


def flip_one_byte(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    raw[-5] ^= 0x01  # inside the last tensor's data, past the header
    path.write_bytes(bytes(raw))


DAMAGE: dict[str, Callable[[Path], None]] = {"truncated": truncate, "one byte flipped": flip_one_byte}


def _config(on_damage: str) -> dict[str, object]:
    tree = tiny_config(rounds=6, clients_per_round=4, threads=1, data__clients=4, eval_every=0)
    tree["algorithm"] = {"kind": "scaffold", "lr": 0.05, "batch_size": 16}
    tree["checkpoint"] = {"every": 1, "keep": 10}
    tree["state"] = {"backend": "disk", "cache_mb": 0, "on_damage": on_damage}  # every read from the file
    return tree


def _damage_after_round(
    round_: int, damage: Callable[[Path], None], out: Path
) -> Callable[[Simulation, RoundResult], None]:
    def callback(sim: Simulation, result: RoundResult) -> None:
        if result.round == round_:
            # once the round's checkpoint is written: its copies are made in the background from hard links, so
            # a file altered in place before that would reach it (the case the next test's set-aside covers)
            sim.engine.writer.wait()
            damage(out / "state" / "client-2.safetensors")

    return callback


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_state_file_stops_the_run_interrupted_and_the_resume_finishes(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, db = tmp_path / "run", tmp_path / "runs.db"
    tree = _config("stop")
    sim = Simulation(tree, out=out, db=db, callbacks=[_damage_after_round(2, DAMAGE[kind], out)])
    with pytest.raises(RunInterrupted) as stopped:
        sim.run()
    message = str(stopped.value)
    assert "\n" not in message
    assert f"{out / 'state' / 'client-2.safetensors'}" in message and "client 2" in message
    newest = checkpoint.complete(out / "checkpoints")[-1]
    assert f"newest intact checkpoint {newest}: `fedsim resume {out}`" in message
    with RunStore.open_readonly(db) as store:
        runs = store.list_runs()
    assert [r.status for r in runs] == ["interrupted"]

    assert main(["resume", str(out), "--db", str(db)]) == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rounds"] == 6
    with RunStore.open_readonly(db) as store:
        assert store.get_run(summary["run_id"]).status == "finished"  # type: ignore[union-attr]


def test_checkpoints_that_copied_the_damaged_file_are_set_aside_so_the_resume_starts_before_them(
    tmp_path: Path,
) -> None:
    out = tmp_path / "run"
    Simulation(_config("stop"), out=out, db=tmp_path / "runs.db").run()
    saved = checkpoint.complete(out / "checkpoints")
    live = out / "state" / "client-2.safetensors"
    for path in [live, *(ckpt / "state" / live.name for ckpt in saved[-2:])]:
        flip_one_byte(path)  # as if damaged before the two newest checkpoints copied it
    with pytest.raises(StateDamaged) as damaged:
        read_state(live, 2)
    message = str(RunInterrupted.after("r1", 6, out, damaged.value))
    assert message.startswith(f"state of client 2 in {live} does not match its checksum")
    assert f"newest intact checkpoint {saved[-3]}: `fedsim resume {out}`" in message
    assert "(2 newer holding the damaged file set aside as" in message
    assert checkpoint.complete(out / "checkpoints") == saved[: -3 + 1]
    assert sorted(p.name for p in (out / "checkpoints").glob(".damaged-*")) == [
        f".damaged-{p.name}" for p in saved[-2:]
    ]


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_with_on_damage_reset_the_client_starts_fresh_with_a_warning_the_run_store_counts(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, db = tmp_path / "run", tmp_path / "runs.db"
    sim = Simulation(_config("reset"), out=out, db=db, callbacks=[_damage_after_round(2, DAMAGE[kind], out)])
    summary = sim.run()
    err = capsys.readouterr().err
    assert err.count("state.on_damage: reset") == 1, err
    assert f"{out / 'state' / 'client-2.safetensors'}" in err and "client 2 starts again from fresh state" in err
    assert (out / "state" / "damaged-client-2.safetensors").is_file()  # kept, not deleted
    with RunStore.open_readonly(db) as store:
        run = store.get_run(summary.run_id)
        metrics = {row.round: json.loads(row.metrics_json) for row in store.rounds(summary.run_id)}
    assert run is not None and run.status == "finished"
    assert {r: m["state_resets"] for r, m in metrics.items() if "state_resets" in m} == {2: 1.0}
