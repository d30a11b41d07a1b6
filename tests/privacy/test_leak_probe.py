"""The audit's leak probe: a DP run against its diagnostics twin (the same seed, the same noise, the clients'
un-noised statistics stored and labelled). Every value the twin stores that the DP run withholds (each
client's loss and sample count, a round's train loss and sample total, federated evaluation's spread,
SecAgg+'s quantization error, the run's sample total) is looked for in everything the DP run wrote: every
column of every table of its run store (JSON columns parsed), summary.json, every checkpoint's meta.json,
the CSV tracker's file and TensorBoard's events (read with TensorBoard's own reader). None may be found."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fedsim.config import parse_config
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config

PRIVACY = {"kind": "central", "clip": 0.5, "noise_multiplier": 1.0}
SECAGG = {"kind": "secagg_plus", "num_shares": 3, "reconstruction_threshold": 2}


def _run(out: Path, diagnostics: bool) -> None:
    tree = tiny_config(
        rounds=3,
        clients_per_round=10,
        devices=2,
        federated_eval={"kind": "holdout", "holdout": 0.2},
        checkpoint={"every": 1},
        tracking=["csv", "tensorboard"],
        secagg=SECAGG,
        privacy={**PRIVACY, "diagnostics": diagnostics},
    )
    Engine(parse_config(tree), out_dir=out, db_path=out / "runs.db").run()


def _numbers(value: Any, where: str) -> Iterator[tuple[str, float]]:
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int | float):
        yield where, float(value)
    elif isinstance(value, str):
        try:
            yield from _numbers(json.loads(value), where)
        except ValueError:
            return
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _numbers(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for n, item in enumerate(value):
            yield from _numbers(item, f"{where}[{n}]")


def _stored(out: Path) -> list[tuple[str, float]]:
    """Every number the run wrote, with where."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    found: list[tuple[str, float]] = []
    with sqlite3.connect(out / "runs.db") as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            columns = [c[1] for c in db.execute(f"PRAGMA table_info({table})")]
            for row in db.execute(f"SELECT * FROM {table}"):
                for column, value in zip(columns, row, strict=True):
                    found += _numbers(value, f"{table}.{column}")
    for path in out.rglob("*.json"):
        found += _numbers(json.loads(path.read_text()), str(path.relative_to(out)))
    for path in out.rglob("*.csv"):
        for n, line in enumerate(path.read_text().splitlines()[1:]):
            found += _numbers([_float(cell) for cell in line.split(",")], f"{path.name}:{n}")
    (events,) = {p.parent for p in out.rglob("events.out.tfevents.*")}
    accumulator = EventAccumulator(str(events))
    accumulator.Reload()
    for tag in accumulator.Tags()["scalars"]:
        found += [(f"tensorboard:{tag}", e.value) for e in accumulator.Scalars(tag)]
    return found


def _float(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def _withheld(out: Path) -> list[tuple[str, float]]:
    """What the diagnostics twin stores that DP withholds."""
    with sqlite3.connect(out / "runs.db") as db:
        values = [(f"client loss {c}", x) for c, x in db.execute("SELECT client, loss FROM client_runs")]
        values += [(f"client samples {c}", x) for c, x in db.execute("SELECT client, samples FROM client_runs")]
        values += [(f"round {r} train_loss", x) for r, x in db.execute("SELECT round, train_loss FROM rounds")]
        values += [(f"round {r} samples", x) for r, x in db.execute("SELECT round, samples FROM rounds")]
        for r, metrics in db.execute("SELECT round, metrics_json FROM rounds"):
            m = json.loads(metrics)
            values += _numbers(m["fed_eval"], f"round {r} fed_eval")
            values.append((f"round {r} secagg error", m["secagg_quantization_error"]))
    summary = json.loads((out / "summary.json").read_text())
    values += _numbers(summary["federated_eval"], "summary federated_eval")
    values += [("summary samples", summary["samples"]), ("summary secagg", summary["secagg"]["quantization_error"])]
    return [(what, float(x)) for what, x in values if x is not None]


def _same(withheld: float, stored: float) -> bool:
    if withheld.is_integer():  # a sample count: only counts that could not be an index or a small setting
        return withheld >= 100 and stored == withheld
    return math.isclose(stored, withheld, rel_tol=1e-6)  # float32 in TensorBoard


def test_a_dp_run_stores_none_of_what_its_diagnostics_twin_shows_dp_withholds(tmp_path: Path) -> None:
    _run(tmp_path / "dp", diagnostics=False)
    _run(tmp_path / "diag", diagnostics=True)
    withheld = _withheld(tmp_path / "diag")
    for kind in ("client loss", "client samples", "train_loss", "fed_eval", "secagg error", "summary samples"):
        assert any(kind in what for what, _ in withheld), kind  # every kind of withheld value is probed for
    stored = _stored(tmp_path / "dp")
    assert len(stored) > 500  # the run wrote plenty: the probe looked
    found = [(what, where, x) for what, w in withheld for where, x in stored if _same(w, x)]
    assert found == []
    twin = _stored(tmp_path / "diag")  # the probe finds them where they are stored
    assert any(_same(w, x) for what, w in withheld if what.startswith("client loss") for _, x in twin)
