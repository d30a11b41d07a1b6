"""``Simulation.set`` changes what the next round does, callbacks record metrics, and building writes nothing."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim import RoundResult, Simulation
from fedsim.config import ConfigError
from fedsim.runstore import RunStore
from tests.conftest import tiny_config


def _sim(tmp_path: Path, callbacks: list[Any], **overrides: Any) -> Simulation:
    tree = tiny_config(threads=1, **overrides)
    return Simulation(tree, callbacks=callbacks, out=tmp_path / "out", db=tmp_path / "runs.db")


def test_building_a_simulation_writes_nothing_until_it_runs(tmp_path: Path) -> None:
    sim = _sim(tmp_path, [], state={"backend": "disk"}, algorithm={"kind": "scaffold"})
    assert list(tmp_path.iterdir()) == []
    sim.run()
    assert (tmp_path / "runs.db").is_file() and (tmp_path / "out" / "summary.json").is_file()
    with RunStore.open_readonly(tmp_path / "runs.db") as store:
        assert [r.status for r in store.list_runs()] == ["finished"]


def test_set_weighting_weights_the_next_rounds_clients_uniformly(tmp_path: Path) -> None:
    weight_sums: list[float] = []

    def watch(sim: Simulation, result: RoundResult) -> None:
        weight_sums.append(float(sim.engine.executor.local_sum.segments["weight"]))
        if result.round == 1:
            sim.set("weighting", "uniform")

    _sim(tmp_path, [watch], rounds=3).run()
    assert weight_sums[0] > 5 * 10  # samples: every digits client holds dozens
    assert weight_sums[1:] == [5.0, 5.0]  # 5 clients a round, weight 1 each


def test_set_optimizer_state_makes_the_run_stateful_from_the_next_round(tmp_path: Path) -> None:
    stored: list[int] = []

    def watch(sim: Simulation, result: RoundResult) -> None:
        stored.append(len(sim.engine.store))
        if result.round == 1:
            sim.set("client_optimizer.state", "client")

    sim = _sim(tmp_path, [watch], rounds=3, algorithm={"kind": "fedavg", "client_optimizer": {"momentum": 0.9}})
    sim.run()
    assert stored[0] == 0 and stored[2] > 0  # momentum buffers kept per client once asked for
    assert sim.engine.stateful and all(
        set(s) == {"optimizer.momentum"} for s in (sim.engine.store.get(c) for c in range(10)) if s is not None
    )


def test_set_optimizer_trains_with_adam_and_leaves_the_fused_executor(tmp_path: Path) -> None:
    kinds: list[str] = []

    def watch(sim: Simulation, result: RoundResult) -> None:
        kinds.append(sim.engine.executor_kind)
        if result.round == 1:
            sim.set("client_optimizer.kind", "adam")
            sim.set("client_optimizer.state", "client")
            assert sim.get("client_optimizer.kind") == "adam"

    sim = _sim(tmp_path, [watch], rounds=2, executor={"kind": "auto"})
    sim.run()
    assert kinds == ["fused", "sequential"]  # Adam is not fused: auto falls back from the next round
    states = [sim.engine.store.get(c) for c in range(10)]
    assert any(s is not None and "optimizer.exp_avg" in s for s in states)


def test_set_refuses_what_cannot_change_in_one_line(tmp_path: Path) -> None:
    sim = _sim(tmp_path, [], executor={"kind": "fused"})
    with pytest.raises(ConfigError, match=r"^algorithm\.kind: a run cannot change its algorithm \('fedavg'\)$"):
        sim.set("kind", "scaffold")
    fused = r"^executor\.kind=fused: client momentum \(client_optimizer\.momentum\) is not fused"
    with pytest.raises(ConfigError, match=fused):
        sim.set("client_optimizer.momentum", 0.9)
    assert sim.get("client_optimizer.momentum") == 0.0 and sim.engine.executor_kind == "fused"  # as it was
    with pytest.raises(
        ConfigError,
        match=r"^algorithm\.client_optimizer\.nesterov needs client_optimizer\.momentum > 0$",
    ):
        sim.set("client_optimizer.nesterov", True)
    with pytest.raises(ConfigError, match=r"^algorithm\.weighting: Input should be 'samples' or 'uniform'"):
        sim.set("weighting", "by-size")


def test_set_server_optimizer_lr_keeps_the_moments_and_scales_the_next_steps(tmp_path: Path) -> None:
    """FedAdam's lr set after the first round: to its own value, the weights are those of the run never told
    (the moments and the step count went on); to 1e-9 after the second, the last two barely move the model;
    plain sgd's lr 0.5 makes the second round's step half the clients' mean update, read off its global sums."""
    optimizer = {"kind": "fedadam", "lr": 0.05}

    def final(new_lr: float | None) -> torch.Tensor:
        def watch(sim: Simulation, result: RoundResult) -> None:
            if result.round == 1 and new_lr is not None:
                sim.set("server_optimizer.lr", new_lr)

        name = f"adam-{new_lr}"
        sim = Simulation(
            tiny_config(threads=1, rounds=4, server_optimizer=optimizer),
            callbacks=[watch],
            out=tmp_path / name,
            db=tmp_path / "runs.db",
        )
        sim.run()
        assert new_lr is None or sim.cfg.server_optimizer.lr == new_lr
        return sim.engine.global_state.clone()

    untold, same = final(None), final(0.05)
    assert torch.equal(untold, same)
    moved: list[torch.Tensor] = []

    def freeze(sim: Simulation, result: RoundResult) -> None:
        moved.append(sim.engine.global_state.clone())
        if result.round == 2:  # rounds count from 1 here
            sim.set("server_optimizer.lr", 1e-9)

    Simulation(
        tiny_config(threads=1, rounds=4, server_optimizer=optimizer),
        callbacks=[freeze],
        out=tmp_path / "frozen",
        db=tmp_path / "runs.db",
    ).run()
    assert float((moved[3] - moved[1]).abs().max()) < 1e-6 < float((moved[1] - moved[0]).abs().max())
    steps: list[tuple[torch.Tensor, torch.Tensor]] = []

    def halve(sim: Simulation, result: RoundResult) -> None:
        sums = sim.engine.executor.local_sum.segments
        steps.append((sim.engine.global_state.clone(), sums["delta"] / sums["weight"]))
        if result.round == 1:
            sim.set("server_optimizer.lr", 0.5)

    _sim(tmp_path, [halve], rounds=2, server_optimizer={"kind": "sgd"}).run()
    (before, _), (after, mean) = steps
    torch.testing.assert_close(after - before, 0.5 * mean, rtol=1e-5, atol=1e-7)


def test_set_server_optimizer_refuses_in_one_line(tmp_path: Path) -> None:
    sim = _sim(tmp_path, [], server_optimizer={"kind": "adam"})
    with pytest.raises(ConfigError, match=r"^server_optimizer\.lr: Input should be greater than 0"):
        sim.set("server_optimizer.lr", -1.0)
    with pytest.raises(
        ConfigError, match=r"^server_optimizer\.momentum: no such setting of server_optimizer\.kind=adam$"
    ):
        sim.set("server_optimizer.momentum", 0.9)
    with pytest.raises(
        ConfigError, match=r"server_optimizer\.kind: a run cannot change its server optimiser \('adam'\)"
    ):
        sim.set("server_optimizer.kind", "sgd")
    with pytest.raises(ConfigError, match=r"algorithm\.server_lr: no such setting .* is server_optimizer\.lr\)$"):
        sim.set("server_lr", 0.5)


def test_a_callbacks_metric_lands_in_the_run_store_and_summary(tmp_path: Path) -> None:
    def spread(sim: Simulation, result: RoundResult) -> Mapping[str, float]:
        weights = next(result.model().parameters()).detach()
        return {"weight_norm": float(weights.norm()), "round_seen": float(result.round)}

    sim = _sim(tmp_path, [spread], rounds=3)
    summary = sim.run()
    with RunStore.open_readonly(tmp_path / "runs.db") as store:
        rows = store.rounds(summary.run_id)
    recorded = [json.loads(r.metrics_json) for r in rows]
    assert [m["round_seen"] for m in recorded] == [1.0, 2.0, 3.0]
    assert all(m["weight_norm"] > 0 for m in recorded)
    saved = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert saved["callback_metrics"] == {"weight_norm": recorded[-1]["weight_norm"], "round_seen": 3.0}
    last = torch.nn.utils.parameters_to_vector(RoundResult.of(rows[-1], sim.engine).model().parameters())
    assert torch.equal(last, sim.engine.global_state[: last.numel()])


@pytest.mark.parametrize(
    ("metrics", "message"),
    [
        ({"test_accuracy": 1.0}, "callback metric 'test_accuracy': the round already records a metric of that name"),
        ({"gap": float("nan")}, "callback metric 'gap': nan is not a finite number"),
        ({"gap": "high"}, "callback metric 'gap': high is not a finite number"),
        ({"": 1.0}, "callback metric '': a name is 1-64 characters"),
    ],
)
def test_a_bad_callback_metric_is_one_line(tmp_path: Path, metrics: dict[str, Any], message: str) -> None:
    sim = _sim(tmp_path, [lambda sim, result: metrics])
    with pytest.raises(ConfigError) as raised:
        sim.run()
    assert str(raised.value) == message
