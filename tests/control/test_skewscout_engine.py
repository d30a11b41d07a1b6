"""SkewScout inside the simulator: the knob sets local steps, probes are charged and logged, state resumes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from safetensors.torch import load_file

from fedsim.config import ConfigError, parse_config
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from tests.conftest import RunFactory, tiny_config


def skewed(**control: Any) -> dict[str, Any]:
    tree = tiny_config(
        rounds=200,
        clients_per_round=None,
        eval_every=0,
        data__clients=5,
        data__partition={"kind": "label_skew", "skew": 1.0},
        algorithm__lr=0.5,
        algorithm__local_steps=1,
    )
    tree["control"] = control
    return tree


def test_fixed_knob_sets_local_steps_and_the_budget_ends_the_run(run_engine: RunFactory) -> None:
    knob = {"ladder": [1, 4], "start": 1}
    engine = run_engine(skewed(kind="none", knob=knob, budget_steps=20))
    summary = engine.summary()
    assert summary.rounds == 5 and summary.local_steps == 20
    assert summary.bytes_probe == 0
    assert summary.final_accuracy == summary.final_accuracy  # evaluated after the last (budgeted) round


def test_skewscout_tightens_under_full_skew_and_charges_its_probes(run_engine: RunFactory) -> None:
    engine = run_engine(skewed(kind="skewscout", target=[1, 3], probe_every=1, pairs=4, budget_steps=150))
    with RunStore(engine.out_dir / "fedsim.db") as store:
        decisions = store.decisions(engine.run_id)
        rounds = store.rounds(engine.run_id)
    assert decisions[0].old == 64 and decisions[0].action == "tighten"  # starts loosest, loss is far above 3
    assert [d.round for d in decisions] == [r.round for r in rounds]
    assert all(d.estimate > 3 for d in decisions if d.action == "tighten")
    summary = engine.summary()
    assert summary.bytes_probe == sum(d.probe_bytes for d in decisions) > 0
    assert 0 < summary.probe_s < summary.rounds_s
    assert sum(json.loads(r.metrics_json)["probe_s"] for r in rounds) == pytest.approx(summary.probe_s)
    model_bytes = 4 * engine.executor.replica.numel
    assert decisions[0].probe_bytes == 2 * model_bytes * len(json.loads(decisions[0].gaps_json)) == 2 * model_bytes * 4
    assert summary.local_steps >= 150
    knobs = [json.loads(r.metrics_json)["knob"] for r in rounds]
    assert knobs[0] == 64 and knobs[-1] < 64


@pytest.mark.parametrize("knob", [{"name": "local_steps"}, {"name": "topk"}])
def test_resume_restores_the_controller(tmp_path: Path, knob: dict[str, str]) -> None:
    tree = skewed(kind="skewscout", probe_every=2, pairs=3, budget_steps=300 if knob["name"] == "local_steps" else 20)
    tree["control"]["knob"] = knob
    tree["checkpoint"] = {"every": 3}
    cfg = parse_config(tree)
    straight = Engine(cfg, tmp_path / "a", tmp_path / "a.db")
    straight.run()
    # resume the finished run from its newest checkpoint: the rounds after it replay exactly
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    shutil.copy(tmp_path / "a.db", tmp_path / "b.db")
    resumed = Engine(cfg, tmp_path / "b", tmp_path / "b.db", resume=True)
    assert resumed.next_round > 0
    resumed.run()
    with RunStore(tmp_path / "a.db") as a, RunStore(tmp_path / "b.db") as b:
        assert a.decisions(straight.run_id) == b.decisions(resumed.run_id)
    weights = [load_file(tmp_path / d / "model.safetensors")["global"] for d in ("a", "b")]
    assert weights[0].equal(weights[1])


@pytest.mark.parametrize(
    ("control", "message"),
    [
        ({"kind": "skewscout", "target": [3, 1]}, "low < high"),
        ({"kind": "skewscout", "knob": {"ladder": [4, 2]}}, "increasing"),
        ({"kind": "skewscout", "knob": {"ladder": [1, 2], "start": 2}}, "outside the ladder"),
        ({"kind": "none", "budget_steps": 10}, "set a local_steps knob or algorithm.local_steps"),
        ({"kind": "skewscout", "knob": {"name": "topk", "ladder": [0.1, 0.5]}}, "decreasing fractions"),
        ({"kind": "skewscout", "knob": {"name": "local_steps", "ladder": [1, 2.5]}}, "whole numbers"),
    ],
)
def test_bad_control_is_refused(tmp_path: Path, control: dict[str, Any], message: str) -> None:
    tree = skewed(**control)
    tree["algorithm"].pop("local_steps")
    with pytest.raises((ConfigError, ValueError), match=message):
        Engine(parse_config(tree), tmp_path, tmp_path / "db")


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "scaffold", "fednova", "ditto"])
def test_probes_see_the_local_model_not_the_update(name: str) -> None:
    """What SkewScout scores is the client's trained model: global + its (unweighted) delta."""
    import torch

    from fedsim.algorithms import build_algorithm
    from fedsim.algorithms.base import ClientContext
    from fedsim.algorithms.group import run_client
    from fedsim.data import build_dataset
    from fedsim.models import Replica, build_model

    cfg = parse_config(tiny_config(algorithm__kind=name, algorithm__local_steps=3))
    dataset = build_dataset(cfg.data, 0)
    replica = Replica(build_model(cfg.model, dataset.input_shape, dataset.num_classes, 0))
    algorithm = build_algorithm(cfg.algorithm, dataset.num_clients)
    global_state = replica.flat.clone()
    seen: dict[int, torch.Tensor] = {}
    generator = torch.Generator().manual_seed(0)

    def observe(cid: int, model: torch.Tensor) -> None:
        seen.setdefault(cid, model.clone())

    ctx = ClientContext(2, 0, global_state, 1.0, generator, observe)
    data = dataset.client(2)
    run_client(algorithm, replica, data, None, ctx)
    assert list(seen) == [2]
    assert not torch.equal(seen[2], global_state)  # it trained
    # the local model classifies the client's own data at least as well as the global model it started from
    from fedsim.tasks.evaluate import evaluate

    own = evaluate(replica, seen[2], data, 1024).loss
    start = evaluate(replica, global_state, data, 1024).loss
    assert own < start


def test_topk_knob_sends_k_entries_per_client_and_loses_nothing_for_good(run_engine: RunFactory) -> None:
    dense = run_engine(skewed(kind="none", budget_steps=4))
    sparse = run_engine(skewed(kind="none", knob={"name": "topk", "ladder": [0.1]}, budget_steps=4))
    numel = sparse.executor.replica.numel
    k = -(-numel // 10)
    per_client_saving = 4 * numel - 8 * k
    assert dense.ledger.total_up - sparse.ledger.total_up == 4 * 5 * per_client_saving  # 4 rounds x 5 clients
    # each client's residual is its own state in the store (checkpointed and handed off with it)
    residuals = {cid: (sparse.store.get(cid) or {}).get("uplink.residual") for cid in range(10)}
    kept = {cid: r for cid, r in residuals.items() if r is not None}
    assert set(kept) == {0, 1, 2, 3, 4} and len(sparse.store) == 5
    assert all(int((r != 0).sum()) > 0 for r in kept.values())


def test_skewscout_turns_the_topk_knob_under_full_skew(run_engine: RunFactory) -> None:
    control = {"kind": "skewscout", "probe_every": 1, "pairs": 4, "knob": {"name": "topk"}, "budget_steps": 12}
    engine = run_engine(skewed(**control))
    with RunStore(engine.out_dir / "fedsim.db") as store:
        decisions = store.decisions(engine.run_id)
    assert decisions[0].old == 0.01 and decisions[0].knob == "topk"
    assert decisions[0].action == "tighten" and decisions[-1].new > 0.01


@pytest.mark.parametrize(("knob", "kind"), [("rank", "powersgd"), ("levels", "qsgd")])
def test_skewscout_turns_a_compressors_knob_under_full_skew(knob: str, kind: str, run_engine: RunFactory) -> None:
    control = {"kind": "skewscout", "probe_every": 1, "pairs": 4, "knob": {"name": knob}, "budget_steps": 12}
    uplink = {"kind": kind, **({"min_compression": 1} if kind == "powersgd" else {})}
    engine = run_engine({**skewed(**control), "uplink": uplink})
    with RunStore(engine.out_dir / "fedsim.db") as store:
        decisions = store.decisions(engine.run_id)
        rounds = store.rounds(engine.run_id)
    assert decisions[0].old == 1 and decisions[0].knob == knob  # starts loosest: rank 1, or 1 level
    assert any(d.action == "tighten" for d in decisions) and decisions[-1].new > 1  # the skew is far above 3
    knobs = [json.loads(r.metrics_json)["knob"] for r in rounds]
    up = [r.bytes_up for r in rounds]
    assert knobs[0] == 1 and knobs[-1] > 1 and up[-1] > up[0]  # a tighter setting sends more


def test_the_fused_executor_hands_local_models_only_to_probe_rounds(tmp_path: Path) -> None:
    """Off probe rounds the controller observes nothing, so the fused executor writes deltas straight from the
    trained stack; on a probe round it gets each pair's local model and SkewScout decides on them."""
    tree = skewed(kind="skewscout", target=[1, 3], probe_every=2, pairs=2, budget_steps=300)
    tree["model"] = {"kind": "mlp", "hidden": [16]}
    tree["executor"] = {"kind": "fused", "clients": 2}
    engine = Engine(parse_config(tree), out_dir=tmp_path, db_path=tmp_path / "fedsim.db")
    observed = []
    assert engine.control is not None  # SkewScout's controller: built only for it
    for r in range(4):
        engine.control.begin_round(r)
        observed.append(engine.control.observer is not None)
    assert observed == [False, True, False, True]
    engine.run()
    with RunStore(tmp_path / "fedsim.db") as store:
        decisions = store.decisions(engine.run_id)
    assert decisions and all(d.round % 2 == 1 for d in decisions)
    assert all(len(json.loads(d.gaps_json)) == 2 for d in decisions)  # both pairs' local models were seen


@pytest.mark.parametrize(
    "control",
    [
        {"kind": "none"},
        {"kind": "none", "knob": {"name": "topk", "ladder": [0.5, 0.1], "start": 1}},
        {"kind": "none", "knob": {"ladder": [1, 4], "start": 1}, "budget_steps": 12},
    ],
    ids=["plain", "topk", "local_steps"],
)
def test_control_fixed_runs_no_controller_code(
    control: dict[str, Any], run_engine: RunFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every Controller method counts its calls: a fixed run makes none, and its setting still holds (top-k's
    tenth of the entries, four local steps until the budget of 12 ends the run after 3 rounds)."""
    from fedsim.control.skewscout import Controller

    calls: list[str] = []

    def count(name: str, function: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(name)
            return function(*args, **kwargs)

        return counted

    for name, member in list(vars(Controller).items()):  # its methods, __init__ included, and its properties
        if isinstance(member, property):
            monkeypatch.setattr(Controller, name, property(count(name, member.fget)))
        elif callable(member) and not isinstance(member, staticmethod | type) and name != "__class_getitem__":
            monkeypatch.setattr(Controller, name, count(name, member))
    tree = tiny_config(rounds=6, algorithm__local_steps=2, control=control)
    engine = run_engine(tree)
    assert calls == [] and engine.control is None
    summary = engine.summary()
    if "budget_steps" in control:
        assert summary.rounds == 3 and summary.local_steps == 12
    if control.get("knob", {}).get("name") == "topk":
        with RunStore(engine.out_dir / "fedsim.db") as store:
            first = store.rounds(engine.run_id)[0]
        numel = engine.executor.replica.numel
        assert json.loads(first.metrics_json)["knob"] == 0.1
        assert first.bytes_up == 5 * (8 * -(-numel // 10) + 4)  # 5 clients: a tenth of the entries, their indices
    counting = Engine(
        parse_config(skewed(kind="skewscout", probe_every=1, pairs=2)), engine.out_dir / "s", engine.out_dir / "s.db"
    )
    counting.run_round(0)
    assert "__init__" in calls and "begin_round" in calls and "end_round" in calls  # the counter counts
