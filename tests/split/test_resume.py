"""fedsim split killed between checkpoints resumes to the same adapters, bit for bit, as a run never stopped."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from fedsim.runstore import RunStore


def _config(tmp: Path, sst2_dir: Path, codec: str) -> Path:
    tree = {
        "name": "resume",
        "seed": 3,
        "threads": 1,
        "codec": codec,
        "model": {"split_layer": 5, "max_length": 16},
        "data": {"dir": str(sst2_dir), "clients": 2},
        "train": {"steps": 40, "batch_size": 8, "lr": 5e-3, "checkpoint_every": 5, "eval_every": 20},
    }
    path = tmp / f"{codec.replace(':', '-')}.yaml"
    path.write_text(json.dumps(tree))
    return path


def _split(config: Path, out: Path, db: Path, *extra: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "fedsim.cli", "split", str(config), "--out", str(out), "--db", str(db), *extra]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _steps_logged(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with RunStore.open_readonly(db) as store:
            runs = store.list_runs()
            return max((r.round for run in runs for r in store.rounds(run.run_id)), default=0)
    except Exception:  # the writer may hold the database a moment
        return 0


@pytest.mark.slow
@pytest.mark.parametrize("codec", ["int8", "basis-int8:8"])
def test_a_killed_split_run_resumes_to_the_same_adapters(sst2_dir: Path, tmp_path: Path, codec: str) -> None:
    config = _config(tmp_path, sst2_dir, codec)
    whole = _split(config, tmp_path / "whole", tmp_path / "whole.db")
    assert whole.wait(timeout=300) == 0, whole.stderr.read() if whole.stderr else ""

    killed = _split(config, tmp_path / "cut", tmp_path / "cut.db")
    deadline = time.time() + 300
    while _steps_logged(tmp_path / "cut.db") < 13 and killed.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert killed.poll() is None, "the run finished before it could be killed"
    killed.send_signal(signal.SIGKILL)
    killed.wait(timeout=30)
    progress = json.loads((tmp_path / "cut" / "adapters" / "progress.json").read_text())
    assert 10 <= progress["step"] < 40

    resumed = _split(config, tmp_path / "cut", tmp_path / "cut.db", "--resume")
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read() if resumed.stderr else ""
    for name in ("adapter_model.safetensors", "head.safetensors"):
        want, got = load_file(tmp_path / "whole" / "adapters" / name), load_file(tmp_path / "cut" / "adapters" / name)
        assert want.keys() == got.keys()
        assert all(bool((want[k] == got[k]).all()) for k in want), name  # bit for bit
    a = json.loads((tmp_path / "whole" / "summary.json").read_text())
    b = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert (a["test_accuracy"], a["steps"]) == (b["test_accuracy"], b["steps"])
    if codec == "int8":  # a restarted edge re-sends a shared basis, so only a stateless codec's bytes match
        assert a["bytes_up"] == b["bytes_up"]
    with RunStore.open_readonly(tmp_path / "cut.db") as store:
        (run,) = store.list_runs()
        assert [r.round for r in store.rounds(run.run_id)] == list(range(1, 41))  # no step twice, none missing


@pytest.mark.slow
def test_resume_without_a_checkpoint_is_one_line(sst2_dir: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, sst2_dir, "int8")
    done = subprocess.run(
        [sys.executable, "-m", "fedsim.cli", "split", str(config), "--out", str(tmp_path / "none"), "--resume"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "fedsim: error: --resume: no checkpoint in " in done.stderr


@pytest.mark.slow
def test_ctrl_c_stops_a_split_run_between_steps_and_marks_it_interrupted(sst2_dir: Path, tmp_path: Path) -> None:
    config = _config(tmp_path, sst2_dir, "int8")
    db = tmp_path / "runs.db"
    proc = _split(config, tmp_path / "out", db)
    deadline = time.time() + 300
    while _steps_logged(db) < 7 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run finished before it could be stopped"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    text = err.decode()
    assert proc.returncode == 130 and text.count("\n") == 1 and "Traceback" not in text, text
    assert "interrupted" in text and "--resume" in text
    with RunStore.open_readonly(db) as store:
        (run,) = store.list_runs()
        steps = [r.round for r in store.rounds(run.run_id)]
    assert run.status == "interrupted" and steps == list(range(1, len(steps) + 1)) and len(steps) < 40
    resumed = _split(config, tmp_path / "out", db, "--resume")  # and it goes on from its newest checkpoint
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read() if resumed.stderr else ""
