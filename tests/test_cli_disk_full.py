"""A disk that fills during a run: one line, exit 1, and the newest checkpoint intact (or none half-written)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fedsim.cli import main

QUICK = str(Path(__file__).resolve().parents[1] / "examples" / "quickstart.yaml")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mounts a tmpfs of a given size (``"2m"``), where root may mount one; skipped elsewhere."""
    import os
    import subprocess

    mounts: list[Path] = []

    def mount(size: str) -> Path:
        where = tmp_path / f"small-{size}"
        where.mkdir()
        if (
            os.geteuid() != 0
            or subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)]).returncode
        ):
            pytest.skip("needs root and tmpfs to make a small disk")
        mounts.append(where)
        return where

    try:
        yield mount
    finally:
        for where in mounts:
            subprocess.run(["umount", "-l", str(where)], check=False)


FULL_DISK_RUN = ["run", QUICK, "--set", "rounds=400", "--set", "clients_per_round=4", "--set", "eval_every=0"]
FULL_DISK_RUN += ["--set", "checkpoint.every=1", "--set", "checkpoint.keep=1000", "--set", "threads=1"]


def _fill(out: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """Runs the quickstart into ``out`` until its disk fills: exit 1 and one line, which it returns."""
    code = main([*FULL_DISK_RUN, "--out", str(out), "--db", str(tmp_path / "runs.db")])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err
    return err


def test_a_full_disk_is_one_line_exit_1_and_keeps_the_last_checkpoint(
    small_disk: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedsim.sim.persist import checkpoint

    out = small_disk("2m") / "run"
    err = _fill(out, tmp_path, capsys)
    saved = checkpoint.complete(out / "checkpoints")
    assert saved, "the disk filled before the first checkpoint"
    assert "No space left on device" in err and f"the newest checkpoint {saved[-1]} is intact" in err
    checkpoint.verify(saved[-1])  # what was saved before the disk filled is whole
    assert not list((out / "checkpoints").glob(".*.tmp"))


def test_a_disk_full_before_any_checkpoint_says_so_and_leaves_no_temporary(
    small_disk: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = small_disk("40k") / "run"
    err = _fill(out, tmp_path, capsys)
    assert "No space left on device; no checkpoint had been written, so there is nothing to resume" in err, err
    assert not list(out.rglob("ckpt-*")) and not list(out.rglob(".*tmp*")) and not list(out.rglob(".freeze-*"))


def test_a_run_store_locked_by_another_process_is_one_line_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The machine's state, not the input: exit 1 (as a full disk), not 2 (bad input), and nothing written."""
    import sqlite3

    db = tmp_path / "runs.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")  # another process's long write
    try:
        code = main(["run", QUICK, "--set", "rounds=1", "--out", str(tmp_path / "out"), "--db", str(db)])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("fedsim:")]
    assert code == 1 and len(lines) == 1 and "database is locked" in lines[0], err
    assert not (tmp_path / "out").exists()
