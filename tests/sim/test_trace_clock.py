"""A synchronous run on the trace clock: its rounds end when the trace says (worked out by hand on the 5-client
trace), only the clients that report in time train, and the old spelling of the synchronous baseline
(``asynchronous.kind: sync``) is this run, with the same event log."""

from __future__ import annotations

import json
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim.api.launch import final_weights
from fedsim.config import ConfigError, SpellingNote, parse_config
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config
from tests.traces.test_clock import DURATION, Scripted
from tests.traces.test_traces import five


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "five.npz"
    five().save(path)
    return path


def _rows(db: Path) -> list[tuple[int, dict[str, Any], list[int]]]:
    """Each round's number, its metrics and the clients that trained in it."""
    with RunStore.open_readonly(db) as store:
        (run,) = store.list_runs()
        trained = store.client_runs(run.run_id)
        return [
            (row.round, json.loads(row.metrics_json), sorted(c.client for c in trained if c.round == row.round))
            for row in store.rounds(run.run_id)
        ]


def test_a_rounds_time_is_the_trace_clocks_and_only_who_reports_in_time_trains(tmp_path: Path, trace: Path) -> None:
    clock = {"kind": "trace", "over_select": 1, "deadline_s": 10.0, "max_draws": 3, "trace": {"path": str(trace)}}
    tree = tiny_config(rounds=2, clients_per_round=2, data__clients=5, clock=clock, format=2)
    engine = Engine(parse_config(tree), tmp_path / "out", tmp_path / "runs.db")
    assert engine.rounds is not None
    engine.rounds.clock = Scripted(five(), 5, 3, 0, DURATION.__getitem__, max_draws=3)  # candidates by hand
    engine.run()
    (r0, m0, trained0), (r1, m1, trained1) = _rows(tmp_path / "runs.db")
    # round 0: 1 (30 s), 3 (4 s), 4 (12 s) start at 0; 3 reports at 4, the deadline comes at 10: 3 alone trains
    assert (r0, m0["clock_s"], m0["virtual_s"], m0["applied"], trained0) == (0, 10.0, 10.0, [[3, 0, 4.0, 1.0]], [3])
    assert m0["cohort"] == 3 and m0["dropped"] == 2  # 1 and 4, stopped at the deadline
    # round 1: 1 starts again, 0 drops at 20 when it goes offline, nobody reports by the deadline at 20
    assert (r1, m1["clock_s"], m1["virtual_s"], m1["dropped_clients"], trained1) == (1, 20.0, 10.0, [[0, 20.0]], [])
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["virtual_s"] == 20.0 and summary["clock"]["clock_s"] == 20.0
    assert summary["clock"]["trace"]["fingerprint"] == five().fingerprint()


def test_the_old_synchronous_baseline_is_this_run_with_the_same_event_log(tmp_path: Path, trace: Path) -> None:
    old = tiny_config(
        rounds=4,
        clients_per_round=None,
        asynchronous={"kind": "sync", "concurrency": 3, "buffer": 2, "deadline_s": 30.0, "trace": {"path": str(trace)}},
    )
    clock = {"kind": "trace", "over_select": 1, "deadline_s": 30.0, "trace": {"path": str(trace)}}
    new = tiny_config(rounds=4, clients_per_round=2, clock=clock, format=2)
    note = "asynchronous.kind=sync is spelled clock.kind=trace with clients_per_round=2 and clock.over_select=1"
    with pytest.warns(SpellingNote, match=note):
        respelled = parse_config(old)
    assert respelled == parse_config(new)
    for name, tree in (("old", old), ("new", new)):
        with pytest.warns(SpellingNote) if name == "old" else nullcontext():
            Engine(parse_config(tree), tmp_path / name, tmp_path / f"{name}.db").run()
    events = [(r, m["clock_s"], m["applied"], m["dropped_clients"]) for r, m, _ in _rows(tmp_path / "new.db")]
    assert events == [(r, m["clock_s"], m["applied"], m["dropped_clients"]) for r, m, _ in _rows(tmp_path / "old.db")]
    assert any(applied for _, _, applied, _ in events)
    assert torch.equal(final_weights(tmp_path / "old"), final_weights(tmp_path / "new"))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"emulation": {"dropout": 0.1}}, "emulation: not supported with clock.kind=trace yet"),
        (
            {"privacy": {"kind": "central", "clip": 1.0, "noise_multiplier": 1.0, "noise_cohort": 8}},
            "privacy.noise_cohort: on clock.kind=trace the trace decides who reports",
        ),
        ({"clock": {"kind": "trace", "over_select": 6}}, "clients_per_round + over_select = 11 clients start a round"),
        ({"clock": {"deadline_s": 5.0}}, "clock: over_select, deadline_s and target_accuracy are the trace clock's"),
    ],
)
def test_what_the_trace_clock_does_not_take_is_one_line(overrides: dict[str, Any], message: str) -> None:
    tree = tiny_config(clock={"kind": "trace"}, format=2)
    with pytest.raises(ConfigError) as caught:
        parse_config({**tree, **overrides})
    assert message in str(caught.value) and "\n" not in str(caught.value)
