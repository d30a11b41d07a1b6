"""Selection on the trace clock: the trace's availability is a filter every selector reads, so Oort and
power-of-choice choose each synchronous round's clients among those online at its start (worked out by hand on
the five-client trace), Oort reads the trace's task durations, and a resumed run chooses as the uninterrupted
one. A uniform selection stays the clock's own draw, bit for bit (tests/sim/test_trace_clock.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedsim.api.launch import final_weights
from fedsim.config import ConfigError, parse_config
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from fedsim.traces.clock import EventClock
from fedsim.traces.rounds import SynchronousRounds
from tests.conftest import tiny_config
from tests.traces.test_clock import DURATION
from tests.traces.test_traces import five

ROOT = Path(__file__).resolve().parents[2]
TRACE = {"synthetic": {"clients": 1000}}
ON_THE_CLOCK = {"kind": "trace", "over_select": 3, "deadline_s": 1.5, "trace": TRACE}  # learn/6's clock.yaml


def test_the_clients_online_now_on_five_clients_by_hand() -> None:
    clock = EventClock(five(), 5, concurrency=3, seed=0, duration=DURATION.__getitem__)
    # at 0: 0 is offline until 10, 1 always on, 2 never, 3 in [90, 100) and [0, 5), 4 always (period 50)
    assert clock.online_now().tolist() == [1, 3, 4]
    clock.now = 15.0
    assert clock.online_now().tolist() == [0, 1, 4]
    clock.start([1], version=0)
    assert clock.online_now().tolist() == [0, 4]  # 1 is training: not idle
    alone = EventClock(five(), 1, concurrency=1, seed=0, duration=DURATION.__getitem__)  # client 0 only
    alone.wait_for_online()
    assert alone.now == 10.0  # the server waits for the first client to come online


def test_a_round_starts_whom_the_selector_chose_that_is_online() -> None:
    rounds = SynchronousRounds(five(), 5, cohort=2, over_select=1, seed=0, duration=DURATION.__getitem__)
    rounds.deadline_s = 10.0
    asked: list[list[int]] = []

    def choose() -> list[int]:  # a selector that ignores availability: 0 is offline at 0
        asked.append(rounds.clock.online_now().tolist())
        return [0, 1, 3]

    log = rounds.next_round(choose)
    assert asked == [[1, 3, 4]]
    assert [task.cid for task in log.started] == [1, 3]  # 0 loses its seat
    # 3 (4 s) reports at 4, before it goes offline at 5; 1 (30 s) is still training at the deadline, 10
    assert log.applied == [(3, 0, 4.0, 1.0)] and log.clock_to == 10.0 and log.reported == {3}


def _tree(selection: str | dict[str, Any], **over: Any) -> dict[str, Any]:
    return tiny_config(
        rounds=8,
        clients_per_round=10,
        eval_every=0,
        data={"dataset": "digits", "clients": 100, "partition": {"kind": "dirichlet", "alpha": 0.5}},
        selection={"kind": selection} if isinstance(selection, str) else selection,
        clock=ON_THE_CLOCK,
        format=2,
        **over,
    )


def _name(selection: str | dict[str, Any]) -> str:
    return selection if isinstance(selection, str) else "-".join(str(v) for v in selection.values())


def _started(tmp_path: Path, selection: str | dict[str, Any]) -> tuple[Engine, list[tuple[float, list[int]]]]:
    """Run learn/6's clock with ``selection``; each round's start on the clock and the clients it started."""
    name = _name(selection)
    engine = Engine(parse_config(_tree(selection)), tmp_path / name, tmp_path / name / "runs.db")
    assert engine.rounds is not None
    rounds, seen = engine.rounds, []
    next_round = rounds.next_round

    def logged(choose: Any = None) -> Any:
        log = next_round(choose)
        seen.append((log.started[0].start, [task.cid for task in log.started]))
        return log

    rounds.next_round = logged  # type: ignore[method-assign]
    engine.run()
    return engine, seen


@pytest.mark.parametrize(
    "selection", ["oort", "power_of_choice", {"kind": "power_of_choice", "variant": "pow-d"}], ids=str
)
def test_a_selector_on_the_trace_chooses_among_the_clients_online_at_the_rounds_start(
    tmp_path: Path, selection: str | dict[str, Any]
) -> None:
    engine, seen = _started(tmp_path, selection)
    name = _name(selection)
    trace = engine.trace
    assert len(seen) == 8
    for start, cids in seen:
        assert len(cids) == 13 and len(set(cids)) == 13  # clients_per_round + over_select, every round
        assert all(trace.online(cid, start) for cid in cids), (start, cids)
    summary = json.loads((tmp_path / name / "summary.json").read_text())
    assert summary["stages"][0]["stage"] == "select"


def test_oort_on_the_trace_starts_faster_clients_than_the_uniform_draw(tmp_path: Path) -> None:
    medians = {}  # of the started clients' task seconds on the trace
    for selection in ("uniform", "oort"):
        engine, seen = _started(tmp_path, selection)
        medians[selection] = np.median([engine.seconds(cid) for _, cids in seen for cid in cids])
    assert medians["oort"] < 0.8 * medians["uniform"], medians  # 0.093 s against 0.137 s when written


def test_a_resumed_run_on_the_trace_chooses_and_ends_as_the_uninterrupted_one(tmp_path: Path) -> None:
    tree = _tree("oort", checkpoint={"every": 2})
    for name in ("whole", "cut"):
        engine = Engine(parse_config(tree), tmp_path / name, tmp_path / name / "runs.db")
        engine.run(after_round=(lambda row: row.round == 4) if name == "cut" else None)
    Engine(parse_config(tree), tmp_path / "cut", tmp_path / "cut" / "runs.db", resume=True).run()
    assert torch.equal(final_weights(tmp_path / "cut"), final_weights(tmp_path / "whole"))
    clocks = {}
    for name in ("whole", "cut"):
        with RunStore.open_readonly(tmp_path / name / "runs.db") as store:
            (run,) = store.list_runs()
            trained = store.client_runs(run.run_id)
            clocks[name] = [
                (
                    row.round,
                    json.loads(row.metrics_json)["clock_s"],
                    sorted(c.client for c in trained if c.round == row.round),
                )
                for row in store.rounds(run.run_id)
            ]
    assert clocks["cut"] == clocks["whole"]


def test_a_selector_that_chose_offline_clients_is_told_in_the_rounds_row() -> None:
    rounds = SynchronousRounds(five(), 5, cohort=2, over_select=1, seed=0, duration=DURATION.__getitem__)
    log = rounds.next_round(lambda: [0, 1, 3])
    assert log.not_started == [0]  # offline at 0: its seat is lost, and the row says so
    assert rounds.next_round().not_started is None  # the clock's own draw chooses nobody offline


def test_beside_dp_on_the_trace_a_selector_need_only_not_read_the_clients() -> None:
    """The trace's accounting claims no sampling amplification, so what it needs of a selector is a choice
    that does not depend on the clients' data: Oort's does, a declared data-free one does not."""
    central = {"kind": "central", "clip": 1.0, "noise_multiplier": 1.0}
    with pytest.raises(ConfigError) as caught:
        parse_config(_tree("oort", privacy=central))
    assert str(caught.value).startswith("selection.kind=oort reads what the clients reported, so who reports")
    least_served = {"factory": f"{ROOT / 'examples' / 'own_selector.py'}:LeastServed"}  # declares no reads
    parse_config({**_tree("oort", privacy=central), "selection": least_served})
    measured = {**_tree("oort", privacy=central), "clock": {"kind": "measured"}}
    with pytest.raises(ConfigError, match="is not a uniform sample"):  # on the measured clock: uniform only
        parse_config(measured)
