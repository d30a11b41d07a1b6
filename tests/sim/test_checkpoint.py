"""Crash safety: a run killed with SIGKILL resumes from its last complete checkpoint to the same weights."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
import yaml

from fedsim.api.launch import final_weights
from fedsim.runstore import RunStore
from fedsim.sim.persist import checkpoint
from tests.conftest import killed_once_saved, tiny_config


def _config(tmp_path: Path, backend: str, **server_side: object) -> Path:
    tree = tiny_config(
        rounds=16,
        clients_per_round=20,
        threads=1,
        data__clients=40,
        model={"kind": "cnn", "norm": "group"},
        algorithm={"kind": "scaffold", "lr": 0.05, "batch_size": 8},
    )
    tree["checkpoint"] = {"every": 2, "keep": 3}
    tree["state"] = {"backend": backend}
    tree.update(server_side)
    path = tmp_path / f"{backend}.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def _fedsim(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fedsim.cli", *args], capture_output=True, text=True, check=False)


ROOT = Path(__file__).resolve().parents[2]
SERVER_SIDE = {  # the selector's reports and Oort's pacer, the optimiser's moments, examples/own_server_stage.py's
    "selection": {"kind": "oort", "pacer_step": 2},  # reputation of each client (which decides whom a round
    "server_optimizer": {"kind": "fedadam", "lr": 0.02},  # leaves out): state the checkpoint keeps
    "server_stages": [{"factory": f"{ROOT / 'examples' / 'own_server_stage.py'}:Reputation"}],
    "attack": {"kind": "sign_flip", "fraction": 0.2, "scale": 4.0},
}


@pytest.mark.parametrize(
    ("backend", "server_side"),
    [("memory", {}), ("disk", {"selection": {"kind": "power_of_choice"}}), ("memory", SERVER_SIDE)],
    ids=["memory", "disk-power_of_choice", "oort-fedadam-reputation"],
)
@pytest.mark.slow
def test_sigkill_then_resume_gives_the_uninterrupted_weights(
    tmp_path: Path, backend: str, server_side: dict[str, object]
) -> None:
    cfg = _config(tmp_path, backend, **server_side)
    db = str(tmp_path / "fedsim.db")
    straight = tmp_path / "straight"
    assert _fedsim("run", str(cfg), "--out", str(straight), "--db", db).returncode == 0

    crashed = tmp_path / "crashed"
    argv = [sys.executable, "-m", "fedsim.cli", "run", str(cfg), "--out", str(crashed), "--db", db]
    killed_once_saved(argv, crashed / "checkpoints" / "ckpt-000005")  # its 3rd checkpoint
    assert not (crashed / "summary.json").exists()

    # the newest checkpoint is damaged as a crash mid-copy would leave it: it must be rejected, not used
    newest = checkpoint.complete(crashed / "checkpoints")[-1]
    tensors = newest / "tensors.safetensors"
    tensors.write_bytes(tensors.read_bytes()[:-100])

    resumed = _fedsim("resume", str(crashed), "--db", db)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{tensors} is" in resumed.stderr and "truncated" in resumed.stderr
    assert torch.equal(final_weights(crashed), final_weights(straight))

    summary = json.loads((crashed / "summary.json").read_text())
    with RunStore.open_readonly(db) as store:
        run = store.get_run(summary["run_id"])
        rounds = store.rounds(summary["run_id"])
    assert run is not None and run.status == "finished"
    assert [r.round for r in rounds] == list(range(16))


def test_verify_names_the_damaged_file(tmp_path: Path) -> None:
    snap = checkpoint.Snapshot(4, {"global": torch.arange(10.0)}, {"round": 4}, lambda dest: dest.mkdir())
    path = checkpoint.write(snap, tmp_path, keep=2)
    checkpoint.verify(path)
    (path / "tensors.safetensors").unlink()
    with pytest.raises(checkpoint.CheckpointError, match=r"missing file .*tensors\.safetensors"):
        checkpoint.verify(path)
    path = checkpoint.write(snap, tmp_path, keep=2)
    (path / "meta.json").write_text('{"round": 5}')
    with pytest.raises(checkpoint.CheckpointError, match=r"meta\.json does not match its checksum"):
        checkpoint.verify(path)
    warnings: list[str] = []
    assert checkpoint.load_latest(tmp_path, warn=warnings.append) is None
    assert len(warnings) == 1 and "falling back to an older checkpoint" in warnings[0]


def _flip(path: Path, at: int = -40) -> None:
    """Damage a file in place, as a failing disk would: the same inode, one byte changed."""
    with open(path, "r+b") as fh:
        fh.seek(at, os.SEEK_END)
        byte = fh.read(1)
        fh.seek(-1, os.SEEK_CUR)
        fh.write(bytes([byte[0] ^ 0xFF]))


def _cut_writes(out: Path) -> list[Path]:
    """What a write cut short leaves: a client's temporary file, a freeze's staging directory, a checkpoint's."""
    state, ckpts = out / "state", out / "checkpoints"
    return [*state.glob(".client-*.tmp"), *state.glob(".freeze-*"), *ckpts.glob(".ckpt-*.tmp")]


@pytest.mark.slow
def test_one_damaged_file_costs_only_that_file(tmp_path: Path) -> None:
    cfg = _config(tmp_path, "disk")
    db = str(tmp_path / "fedsim.db")
    straight = tmp_path / "straight"
    assert _fedsim("run", str(cfg), "--out", str(straight), "--db", db).returncode == 0
    crashed = tmp_path / "crashed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedsim.cli", "run", str(cfg), "--out", str(crashed), "--db", db],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not (crashed / "checkpoints" / "ckpt-000005").is_dir():
        assert proc.poll() is None and time.monotonic() < deadline, "run ended before its 3rd checkpoint"
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    older, newest = checkpoint.complete(crashed / "checkpoints")[-2:]
    # a client whose state did not change between the two checkpoints: the same bytes in both
    same = [p.name for p in (newest / "state").iterdir() if (older / "state" / p.name).read_bytes() == p.read_bytes()]
    assert same, "no client state unchanged between two checkpoints: the test needs one"
    for path in (newest / "state" / same[0], crashed / "state" / same[0]):  # the checkpoint and the live state
        assert os.stat(path).st_ino != os.stat(older / "state" / same[0]).st_ino  # no file shared
        _flip(path)
    with pytest.raises(Exception, match="does not match its checksum"):  # the live file is checked on read
        from fedsim.sim.state.state_store import read_state

        read_state(crashed / "state" / same[0], 0)
    # the kill itself may have cut a write short (a client's file or a checkpoint mid-copy): count those too
    cut_by_kill = len(_cut_writes(crashed))
    (crashed / "state" / ".client-3.safetensors.x1y2.tmp").write_bytes(b"half a write")
    (crashed / "checkpoints" / ".ckpt-000007.tmp").mkdir()

    resumed = _fedsim("resume", str(crashed), "--db", db)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{newest / 'state' / same[0]} does not match its checksum" in resumed.stderr  # the older one is used
    assert f"removed {cut_by_kill + 2} temporary file(s)" in resumed.stderr
    assert not _cut_writes(crashed)
    assert torch.equal(final_weights(crashed), final_weights(straight))


def _sigint_once_waiting() -> None:
    """SIGINT to this process once its main thread blocks in BackgroundWriter.wait (not before: on a loaded
    machine a timer could fire before the wait began)."""
    main = threading.main_thread().ident
    assert main is not None
    for _ in range(2000):
        frame = sys._current_frames().get(main)
        names = []
        while frame is not None:
            names.append(frame.f_code.co_name)
            frame = frame.f_back
        if "wait" in names and "settle" not in names and names[0] in ("wait", "_wait_for_tstate_lock"):
            time.sleep(0.05)  # inside the blocking acquire
            os.kill(os.getpid(), signal.SIGINT)
            return
        time.sleep(0.005)


def test_a_ctrl_c_landing_in_the_wait_for_a_checkpoint_does_not_lose_it(tmp_path: Path) -> None:
    """A KeyboardInterrupt raised while the training thread waits for the checkpoint thread; the run then
    settles (as a stopping run does) and the checkpoint is whole, with no temporary directory left."""
    started, release = threading.Event(), threading.Event()

    def slow_state(directory: Path) -> None:
        directory.mkdir()
        started.set()
        release.wait(10)
        (directory / "part").write_bytes(b"x" * 1000)

    writer = checkpoint.BackgroundWriter(tmp_path, keep=2)
    writer.submit(checkpoint.Snapshot(0, {"w": torch.zeros(3)}, {"round": 0}, slow_state))
    assert started.wait(10)
    threading.Thread(target=_sigint_once_waiting, daemon=True).start()  # a real signal: EINTR
    with pytest.raises(KeyboardInterrupt):
        writer.wait()
    threading.Timer(0.3, release.set).start()
    writer.settle()
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt-000000"]
    assert (tmp_path / "ckpt-000000" / "state" / "part").stat().st_size == 1000
