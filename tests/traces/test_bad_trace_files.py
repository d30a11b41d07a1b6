"""A trace file the clock cannot read, given to ``fedsim run``: one line naming the file and what is wrong with
it, exit 2, and nothing written (no output directory, no run store), for each way a file goes wrong."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import refused
from tests.traces.test_traces import five

ARRAYS = ("compute_s", "uplink_bps", "downlink_bps", "period_s", "offsets", "starts", "ends")


def _npz(path: Path, **change: np.ndarray) -> None:
    t = five()
    np.savez(path, **{**{k: getattr(t, k) for k in ARRAYS}, **change}, meta=np.array(json.dumps({})))


def _strings(path: Path) -> None:
    _npz(path, compute_s=np.array(["fast", "slow", "fast", "slow", "fast"]))


def _scalar(path: Path) -> None:
    _npz(path, compute_s=np.array(0.01))


def _fractional_offsets(path: Path) -> None:
    _npz(path, offsets=np.array([0.0, 2.5, 3.0, 3.0, 5.0, 6.0]))


def _truncated(path: Path) -> None:
    five().save(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _csv(path: Path) -> None:
    path.write_text("client,compute_s,uplink_bps\n0,0.01,1e6\n")


def _json(path: Path) -> None:
    path.write_text(json.dumps({"compute_s": [0.01, 0.02]}))


def _npy(path: Path) -> None:
    np.save(path, np.ones(5))


def _mixed_ids(path: Path) -> None:
    device = {"computation": 10.0, "communication": 250.0}
    path.write_bytes(pickle.dumps({1: device, "phone-2": device}))


def _too_large(path: Path) -> None:
    path.write_bytes(pickle.dumps({1: {"computation": 10**400, "communication": 250.0}}))


def _npz_as_pickle(path: Path) -> None:
    five().save(path)


TRACE = "clock.trace.path"
FEDSCALE = "clock.trace.fedscale_capacity"
CASES: dict[str, tuple[str, str, Callable[[Path], None], str]] = {
    "compute_s of strings": (
        TRACE,
        "t.npz",
        _strings,
        "t.npz: trace: compute_s holds strings (<U4), expected numbers (float64)",
    ),
    "compute_s a 0-d scalar": (
        TRACE,
        "t.npz",
        _scalar,
        "t.npz: trace: compute_s has shape [], expected one value per client",
    ),
    "offsets that are not whole": (
        TRACE,
        "t.npz",
        _fractional_offsets,
        "t.npz: trace: offsets holds non-whole numbers (float64), expected whole numbers (int64)",
    ),
    "a truncated npz": (TRACE, "t.npz", _truncated, "t.npz: cannot read a trace (a truncated or damaged .npz"),
    "a CSV file": (
        TRACE,
        "t.csv",
        _csv,
        "t.csv: cannot read a trace: it is text (a CSV or JSON file?); a trace is a NumPy .npz archive",
    ),
    "a JSON file": (TRACE, "t.json", _json, "t.json: cannot read a trace: it is text (a CSV or JSON file?)"),
    "a lone npy array": (TRACE, "t.npy", _npy, "t.npy: cannot read a trace: it is a single .npy array"),
    "FedScale ids of mixed types": (
        FEDSCALE,
        "capacity.pkl",
        _mixed_ids,
        "capacity.pkl: client ids mix int and str keys, which have no order for the trace's rows",
    ),
    "FedScale computation too large for a float": (
        FEDSCALE,
        "capacity.pkl",
        _too_large,
        "capacity.pkl: client 1's computation is not a number a float holds (int too large to convert to float)",
    ),
    "a fedsim trace given as FedScale's": (
        FEDSCALE,
        "t.npz",
        _npz_as_pickle,
        "t.npz: cannot read FedScale's trace: it is a zip archive (a fedsim .npz trace?",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_trace_file_is_one_line_naming_it_exit_2_and_nothing_written(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    field, file, write, expected = CASES[name]
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    write(inputs / file)
    err = refused(tmp_path, capsys, ["rounds=3", "clock.kind=trace", f"{field}={inputs / file}"])
    assert err.startswith(f"fedsim: error: {inputs / file}: ") and expected in err, err
    assert "Traceback" not in err and "allow_pickle" not in err
    assert sorted(p.name for p in inputs.iterdir()) == [file]
