"""A signal stops a pool's ranks together after one round, which rank 0 checkpoints, as it does one process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from fedsim.api.launch import final_weights
from fedsim.runstore import RunStore, RunStoreError
from fedsim.sim.persist import interrupted
from fedsim.sim.persist.interrupted import on_signal, stop_point, stop_points

CONFIG = """\
name: pool
rounds: 60
clients_per_round: 6
progress: false
threads: 1
devices: 2
scheduler: {kind: even}
state: {backend: BACKEND}
data: {dataset: digits, clients: 10, partition: {kind: dirichlet, alpha: 0.5}}
model: {kind: logistic}
algorithm: {kind: scaffold, lr: 0.1, batch_size: 16}
"""


@pytest.fixture(autouse=True)
def _no_request_left() -> Iterator[None]:
    yield
    interrupted._requests = 0


def test_a_pools_loop_has_no_inner_stop_and_a_second_signal_stops_at_once() -> None:
    with stop_points(inner=False):
        on_signal(signal.SIGINT, None)
        stop_point(inner=True)  # between two clients: a rank of a pool never stops alone there
        with pytest.raises(KeyboardInterrupt):
            on_signal(signal.SIGINT, None)  # the second: at once
    with stop_points():  # one process: the second signal waits for the next client
        on_signal(signal.SIGINT, None)
        on_signal(signal.SIGINT, None)
        with pytest.raises(KeyboardInterrupt):
            stop_point(inner=True)


def test_the_ranks_stop_at_a_round_when_any_of_them_was_asked() -> None:
    seen: list[bool] = []

    def pool_of(other_asked: bool) -> Callable[[bool], bool]:
        def agree(asked: bool) -> bool:  # as Pool.any_rank: every rank's flag, or-ed
            seen.append(asked)
            return asked or other_asked

        return agree

    with stop_points(inner=False):
        with pytest.raises(KeyboardInterrupt):
            stop_point(agree=pool_of(True))  # this rank had no signal: it stops with the one that had
        on_signal(signal.SIGTERM, None)
        with pytest.raises(KeyboardInterrupt):
            stop_point(agree=pool_of(False))  # asked here: the others stop with it
        stop_point(agree=pool_of(False))  # the request was taken: no rank asked
    assert seen == [False, True, False]


def _run(cfg: Path, out: Path, db: Path, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "fedsim.cli", *args, "--db", str(db)]
    command += [str(cfg), "--out", str(out)] if args == ("run",) else [str(out)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _interrupt(tmp_path: Path, backend: str, sig: signal.Signals, group: bool = True) -> tuple[Path, Path, Path, str]:
    """``fedsim run --devices 2`` signalled as Ctrl-C does (the whole process group; ``group=False``: the parent
    alone, as ``kill PID``, ``docker stop`` and schedulers do) once two rounds are in the run store; returns the
    config, the output, the run store and stderr."""
    cfg, out, db = tmp_path / "cfg.yaml", tmp_path / "out", tmp_path / "runs.db"
    cfg.write_text(CONFIG.replace("BACKEND", backend))
    proc = _run(cfg, out, db, "run")
    deadline = time.monotonic() + 120
    while _rounds(db) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
        time.sleep(0.05)
    (os.killpg if group else os.kill)(proc.pid, sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    with RunStore.open_readonly(db) as store:
        (run,) = store.list_runs()
    assert run.status == "interrupted"
    return cfg, out, db, err


def _rounds(db: Path) -> int:
    """Rounds in the run store so far: none while rank 0 has yet to create it, or its tables."""
    try:
        with RunStore.open_readonly(db) as store:
            runs = store.list_runs()
            return len(store.rounds(runs[0].run_id)) if runs else 0
    except RunStoreError:
        return 0


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "group"), [(signal.SIGINT, True), (signal.SIGTERM, False)])
def test_ctrl_c_checkpoints_a_pools_last_round_and_the_resume_ends_on_the_same_weights(
    tmp_path: Path, sig: signal.Signals, group: bool
) -> None:
    cfg, out, db, err = _interrupt(tmp_path, "disk", sig, group)
    line = re.fullmatch(r"fedsim: run \S+ interrupted after round (\d+); newest checkpoint (\S+): `(.+)`\n", err)
    assert line is not None, err
    done = int(line[1])
    assert 2 <= done < 60
    assert line[2] == str(out / "checkpoints" / f"ckpt-{done - 1:06d}")  # the round the ranks agreed on
    assert line[3] == f"fedsim resume {out}"

    resumed = _run(cfg, out, db, "resume")
    assert resumed.wait(timeout=300) == 0, resumed.communicate()[1]
    straight = _run(cfg, tmp_path / "straight", db, "run")
    assert straight.wait(timeout=300) == 0, straight.communicate()[1]
    assert torch.equal(final_weights(out), final_weights(tmp_path / "straight"))


@pytest.mark.slow
def test_a_pool_holding_client_states_in_memory_says_why_it_did_not_checkpoint(tmp_path: Path) -> None:
    _, out, _, err = _interrupt(tmp_path, "memory", signal.SIGTERM)
    started, warning, stopped = err.splitlines()
    assert started == (  # checkpoint.every: auto, the default, says so as the run starts
        "fedsim: warning: checkpoint.every=auto takes no checkpoint in this run: rank 0 does not hold the client"
        " states the other ranks keep in memory (state.backend=disk checkpoints a pool); a run killed, or stopped,"
        " cannot be resumed"
    )
    assert re.fullmatch(
        r"fedsim: warning: round \d+ was not checkpointed as the run stopped: rank 0 does not hold the client "
        r"states the other ranks keep in memory \(state.backend=disk checkpoints a pool\)",
        warning,
    )
    assert stopped.endswith("; no checkpoint")
    assert not (out / "checkpoints").exists() and not (out / ".interrupted").exists()


@pytest.mark.slow
def test_a_lost_rank_ends_the_run_failed_in_one_line(tmp_path: Path) -> None:
    """SIGKILL to rank 0 (the one that writes the run store): the parent marks the run failed and says which
    rank was lost, in one line, exit 1; the run resumes from its newest checkpoint."""
    cfg, out, db = tmp_path / "cfg.yaml", tmp_path / "out", tmp_path / "runs.db"
    cfg.write_text(CONFIG.replace("BACKEND", "disk") + "checkpoint: {every: 1}\n")
    proc = _run(cfg, out, db, "run")
    deadline = time.monotonic() + 120
    while _rounds(db) < 3:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
        time.sleep(0.05)
    ranks = subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "spawn_main"], capture_output=True, text=True)
    root = min(int(pid) for pid in ranks.stdout.split())  # rank 0 is started first
    os.kill(root, signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    lines = [line for line in err.splitlines() if line.startswith("fedsim:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.match(
        r"fedsim: error: rank 0 of 2 was lost \(SIGKILL\) \(run pool-\S+\); the run is marked failed", lines[0]
    )
    with RunStore.open_readonly(db) as store:
        (run,) = store.list_runs()
    assert run.status == "failed"
    resumed = _run(cfg, out, db, "resume")
    assert resumed.wait(timeout=300) == 0, resumed.communicate()[1]


@pytest.mark.slow
def test_three_quick_signals_to_one_process_still_stop_it_cleanly(tmp_path: Path) -> None:
    """Ctrl-C three times: the first asks for the round's end, the second for the next client, the third lands
    while the run saves itself, which it finishes: one closing line with the run's id, status interrupted, no
    temporary checkpoint directory left."""
    cfg, out, db = tmp_path / "cfg.yaml", tmp_path / "out", tmp_path / "runs.db"
    cfg.write_text(CONFIG.replace("BACKEND", "disk").replace("devices: 2", "devices: 1"))
    proc = _run(cfg, out, db, "run")
    deadline = time.monotonic() + 120
    while _rounds(db) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
        time.sleep(0.05)
    for _ in range(3):
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.01)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert re.fullmatch(
        r"fedsim: run pool-\S+ interrupted after round \d+; (newest checkpoint \S+: `.+`|no checkpoint)\n", err
    )
    with RunStore.open_readonly(db) as store:
        (run,) = store.list_runs()
    assert run.status == "interrupted"
    assert not list(out.rglob("*.tmp")) and not list(out.rglob(".ckpt-*"))
