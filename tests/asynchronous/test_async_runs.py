"""Asynchronous runs end to end: a replay and a resume from a mid-run checkpoint give the same weights and the
same event log; summary.json says what the clock did and which trace drove it; what the asynchronous server
does not support yet is one line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim.api.launch import build_engine, final_weights
from fedsim.asynchronous.engine import AsyncEngine
from fedsim.config import ConfigError, parse_config
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from tests.conftest import on_one_and_two_ranks, tiny_config
from tests.traces.test_traces import five


def _tree(trace: Path, mode: str = "fedbuff", **overrides: Any) -> dict[str, Any]:
    """``mode``: an asynchronous rule, or ``sync``: a synchronous run on the same clock (2 a round of 3 started).
    10 clients on the 5-device trace (client c is device c % 5): 2 and 7 never online, 0 and 5 online 20 s of
    every 100, 3 and 8 15 s of 100: tasks drop, slots sleep, updates arrive stale."""
    clock = {"kind": "trace", "trace": {"path": str(trace)}}
    if mode == "sync":
        tree = {"rounds": 6, "eval_every": 2, "clients_per_round": 2, "clock": {**clock, "over_select": 1}}
    else:
        settings = {"kind": mode, "concurrency": 3, "buffer": 2}
        tree = {"rounds": 6, "eval_every": 2, "clients_per_round": None, "asynchronous": settings, "clock": clock}
    return tiny_config(**{**tree, **overrides})


def _engine(tree: dict[str, Any], out: Path, db: Path, resume: bool = False) -> Engine:
    engine = build_engine(parse_config(tree), out, db, resume)
    assert isinstance(engine, Engine)
    return engine


def _events(db: Path) -> list[tuple[Any, ...]]:
    with RunStore.open_readonly(db) as store:
        (run,) = store.list_runs()
        rows = store.rounds(run.run_id)
    return [
        (r.round, r.test_accuracy, json.dumps([json.loads(r.metrics_json)[k] for k in ("applied", "dropped_clients")]))
        for r in rows
    ]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    path = tmp_path / "five.npz"
    five().save(path)
    return path


@pytest.mark.parametrize("mode", ["fedbuff", "fedasync", "sync"])
def test_a_replay_and_a_resumed_run_give_the_same_weights_and_event_log(tmp_path: Path, trace: Path, mode: str) -> None:
    tree = _tree(trace, mode, checkpoint={"every": 2})
    _engine(tree, tmp_path / "whole", tmp_path / "whole.db").run()
    _engine(tree, tmp_path / "again", tmp_path / "again.db").run()
    cut = _engine(tree, tmp_path / "cut", tmp_path / "cut.db")
    cut.run(after_round=lambda row: row.round == 2)  # a checkpoint after step 1 (0-based), the run stops after 2
    _engine(tree, tmp_path / "cut", tmp_path / "cut.db", resume=True).run()
    whole = final_weights(tmp_path / "whole")
    assert torch.equal(final_weights(tmp_path / "again"), whole)
    assert torch.equal(final_weights(tmp_path / "cut"), whole)
    log = _events(tmp_path / "whole.db")
    assert _events(tmp_path / "again.db") == log and _events(tmp_path / "cut.db") == log
    applied = [a for _, _, text in log for a in json.loads(text)[0]]
    assert {cid % 5 for cid, *_ in applied} <= {0, 1, 3, 4}  # clients 2 and 7 are never online
    if mode == "sync":  # at most K a round, never stale
        assert 0 < len(applied) <= 12 and all(staleness == 0 for _, staleness, _, _ in applied)
    else:  # K arrivals a FedBuff step, one a FedAsync step; with 3 in flight, some arrive stale
        assert len(applied) == 6 * (2 if mode == "fedbuff" else 1)
        assert any(staleness > 0 for _, staleness, _, _ in applied)


def test_summary_json_holds_the_clock_and_names_the_trace(tmp_path: Path, trace: Path) -> None:
    tree = _tree(trace, "fedbuff", clock__target_accuracy=0.05)
    AsyncEngine(parse_config(tree), tmp_path / "out", tmp_path / "runs.db").run()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["asynchronous"] == {"kind": "fedbuff", "server_steps": 6}
    clock = summary["clock"]
    assert clock["kind"] == "trace"
    assert clock["trace"]["fingerprint"] == five().fingerprint() and clock["trace"]["source"] == "hand"
    times = [t for t, _ in clock["accuracy_by_clock"]]
    assert len(times) == 3 and times == sorted(times) and times[-1] == clock["clock_s"] > 0
    assert clock["time_to_target_s"] == times[0]  # the first evaluation already beats 5% on 10 classes
    assert summary["virtual_s"] == pytest.approx(clock["clock_s"])  # each step's clock advance, summed


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"privacy": {"kind": "local", "noise_multiplier": 1.0, "clip": 1.0}},
            "privacy.kind: asynchronous.kind=fedbuff accounts central DP on the buffer's sum only",
        ),
        (
            {"privacy": {"kind": "central", "noise_multiplier": 1.0, "clip": 1.0, "adaptive": {}}},
            "privacy.adaptive: asynchronous.kind=fedbuff accounts central DP on the buffer's sum only",
        ),
        (
            {"secagg": {"kind": "secagg_plus", "num_shares": 5, "reconstruction_threshold": 3}},
            "secagg: not supported with asynchronous",
        ),
        (
            {"asynchronous": {"kind": "fedasync"}, "aggregator": {"kind": "median"}},
            "aggregator: not supported with asynchronous.kind=fedasync (asynchronous.kind=fedasync mixes each",
        ),
        ({"asynchronous": {"kind": "fedasync"}, "attack": {"kind": "sign_flip", "fraction": 0.2}}, "attack: not"),
        ({"attack": {"kind": "alie", "fraction": 0.2}}, "attack.kind=alie reads a round's honest updates"),
        (
            {"aggregator": {"kind": "krum", "byzantine": 1}},
            "krum with byzantine=1 needs 5 or more clients a round (n >= 2f + 3); the cohort is 2",
        ),
        ({"emulation": {"dropout": 0.1}}, "emulation: not supported with"),
        ({"clients_per_round": 5}, "clients_per_round: asynchronous.kind=fedbuff has no cohort"),
        ({"asynchronous": {"kind": "fedbuff", "concurrency": 11}}, "concurrency=11 exceeds data.clients=10"),
        ({"clock": {"kind": "trace", "deadline_s": 2.0}}, "clock.deadline_s sets a synchronous round"),
        ({"clock": {"kind": "measured"}, "format": 2}, "fedbuff runs on the population trace: set clock.kind"),
    ],
)
def test_what_the_asynchronous_server_does_not_support_is_one_line(
    tmp_path: Path, trace: Path, overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(_tree(trace, **overrides))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_algorithms_the_server_cannot_apply_are_refused_by_name(tmp_path: Path, trace: Path) -> None:
    scaffold = parse_config(_tree(trace, algorithm={"kind": "scaffold", "lr": 0.1}))
    with pytest.raises(ConfigError, match=re.escape("algorithm.kind=scaffold sends more than its model delta")):
        AsyncEngine(scaffold, tmp_path / "a", tmp_path / "a.db")
    ditto = parse_config(_tree(trace, "fedasync", algorithm={"kind": "ditto", "lr": 0.1}))
    with pytest.raises(ConfigError, match=re.escape("kind=fedasync mixes each local model in: algorithm.kind=ditto")):
        AsyncEngine(ditto, tmp_path / "b", tmp_path / "b.db")
    with pytest.raises(ConfigError, match=re.escape("server_optimizer.kind=fedadam: asynchronous.kind=fedasync mixes")):
        parse_config(_tree(trace, "fedasync", server_optimizer={"kind": "fedadam"}))


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "executor"), [("fedbuff", "sequential"), ("fedasync", "fused"), ("sync", "fused")])
def test_two_ranks_give_one_ranks_weights_and_event_log(tmp_path: Path, trace: Path, mode: str, executor: str) -> None:
    """Task k trains on rank k % 2; FedBuff's and the synchronous round's buffers are summed across the ranks
    once a step (float sums in another order: within 2e-5), FedAsync's arrival is its owner's model (exact, and
    the fused executor's rows do not depend on which clients share its group)."""
    tree = _tree(trace, mode, checkpoint={"every": 2}, executor={"kind": executor})
    one, two = on_one_and_two_ranks(tree, tmp_path)
    tolerance = 0.0 if mode == "fedasync" else 2e-5
    torch.testing.assert_close(two, one, rtol=0, atol=tolerance)
    assert _events(tmp_path / "2.db") == _events(tmp_path / "1.db")
    # rank 0's checkpoint after step 3 holds every rank's results in flight: one rank goes on from it
    cfg = parse_config({**tree, "devices": 2, "scheduler": {"kind": "even"}})
    build_engine(cfg, tmp_path / "ranks2", tmp_path / "2.db", resume=True).run()
    torch.testing.assert_close(final_weights(tmp_path / "ranks2"), one, rtol=0, atol=tolerance)


def test_clients_keep_their_optimizer_state_between_tasks(tmp_path: Path, trace: Path) -> None:
    """Clients that keep their momentum between tasks (client_optimizer.state: client) find it in the state store at
    their next task, as in rounds: the run differs from one that resets it, and replays to the same weights."""
    momentum = {"kind": "fedavg", "lr": 0.1, "batch_size": 16, "client_optimizer": {"momentum": 0.9}}
    kept = _tree(trace, algorithm={**momentum, "client_optimizer": {"momentum": 0.9, "state": "client"}})
    reset = _tree(trace, algorithm=momentum)
    for name, tree in (("kept", kept), ("again", kept), ("reset", reset)):
        engine = AsyncEngine(parse_config(tree), tmp_path / name, tmp_path / f"{name}.db")
        engine.run()
        if name == "kept":
            assert len(engine.store) > 0  # states of the clients that trained
    assert torch.equal(final_weights(tmp_path / "again"), final_weights(tmp_path / "kept"))
    assert not torch.equal(final_weights(tmp_path / "reset"), final_weights(tmp_path / "kept"))


@pytest.mark.parametrize("mode", ["fedbuff", "fedasync", "sync"])
def test_the_fused_executor_trains_overlapping_clients_together_to_the_sequential_result(
    tmp_path: Path, trace: Path, mode: str
) -> None:
    """Clients started from one model train as one fused group: the same event log and, within float error
    of batched products, the same weights as one client at a time; a replay and a resume are exact."""
    more = {"clock__over_select": 3} if mode == "sync" else {"asynchronous__concurrency": 5}
    tree = _tree(trace, mode, checkpoint={"every": 2}, **more)
    fused = {**tree, "executor": {"kind": "fused", "clients": 4}}
    engine = _engine(fused, tmp_path / "fused", tmp_path / "fused.db")
    assert engine.executor_kind == "fused"
    sizes: list[int] = []
    train = engine.executor.train

    def counted(context: Any, assignments: list[tuple[int, int]], *rest: Any) -> Any:
        sizes.append(len(assignments))
        return train(context, assignments, *rest)

    engine.executor.train = counted  # type: ignore[method-assign,assignment]
    engine.run()
    assert max(sizes) > 1  # the first fill's clients, at least, in one call
    _engine(tree, tmp_path / "one", tmp_path / "one.db").run()
    torch.testing.assert_close(final_weights(tmp_path / "fused"), final_weights(tmp_path / "one"), rtol=0, atol=1e-5)
    assert [e[2] for e in _events(tmp_path / "fused.db")] == [e[2] for e in _events(tmp_path / "one.db")]
    cut = _engine(fused, tmp_path / "cut", tmp_path / "cut.db")
    cut.run(after_round=lambda row: row.round == 2)
    _engine(fused, tmp_path / "cut", tmp_path / "cut.db", resume=True).run()
    assert torch.equal(final_weights(tmp_path / "cut"), final_weights(tmp_path / "fused"))
    assert _events(tmp_path / "cut.db") == _events(tmp_path / "fused.db")
