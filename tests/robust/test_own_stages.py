"""Your own attack and aggregation rule, registered from a test file, run as the built-in ones do; the
registries' errors; the examples' mimic attack and MeaMed against the papers' formulas."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
import pytest
import torch
from torch import Tensor

from fedsim.api.launch import final_weights
from fedsim.config import (
    AGGREGATORS,
    ATTACKS,
    AttackConfig,
    ConfigError,
    parse_config,
    register_aggregator,
    register_attack,
)
from fedsim.config.robust import AggregatorConfig, GatheringConfig
from fedsim.robust import HonestUpdates, ModelPoisoning, Rule
from fedsim.robust.gather import GatheredRows
from fedsim.sim.rounds.engine import Engine
from tests.conftest import on_one_and_two_ranks, tiny_config

ROOT = Path(__file__).resolve().parents[2]
MLP = {"kind": "mlp", "hidden": [16]}


class ZeroConfig(AttackConfig):
    kind: Literal["test_zero"] = "test_zero"


class ZeroUpdate(ModelPoisoning):
    """Sends nothing: its rows become zero."""

    seen: ClassVar[list[int]] = []

    def poison_(self, rows: Tensor, cids: Sequence[int], round_idx: int) -> None:
        rows.zero_()
        ZeroUpdate.seen.extend(cids)


class NegatedMeanConfig(AttackConfig):
    kind: Literal["test_negated_mean"] = "test_negated_mean"
    reads_honest: ClassVar[bool] = True
    needs_rows: ClassVar[bool] = True


class NegatedMean(ModelPoisoning):
    read: ClassVar[list[Tensor]] = []

    def craft(self, honest: HonestUpdates) -> Tensor:
        assert honest.rows is not None and honest.rows.shape[0] == honest.count
        NegatedMean.read.append(honest.rows.clone())
        return -honest.rows.double().mean(0).float()


class FirstRowConfig(GatheringConfig):
    kind: Literal["test_first_row"] = "test_first_row"


class FirstRow(Rule):
    """The update of the client with the lowest id."""

    def aggregate(self, rows: GatheredRows) -> Tensor:
        return rows.rows[0].clone()


class HalveConfig(AggregatorConfig):
    kind: Literal["test_halve"] = "test_halve"
    per_client: ClassVar[bool] = True
    keeps_clip: ClassVar[bool] = True


class Halve(Rule):
    def transform_(self, update: Tensor) -> None:
        update.mul_(0.5)


class CarriedMeanConfig(GatheringConfig):
    kind: Literal["test_carried_mean"] = "test_carried_mean"


class CarriedMean(Rule):
    """The rows' mean plus half the last aggregate, with a count of rounds: state in a tensor and in JSON."""

    def __init__(self, cfg: AggregatorConfig, numel: int, device: torch.device) -> None:
        super().__init__(cfg, numel, device)
        self.carried = torch.zeros(numel, device=device)
        self.rounds = 0

    def aggregate(self, rows: GatheredRows) -> Tensor:
        self.carried = rows.rows.mean(0) + 0.5 * self.carried
        self.rounds += 1
        return self.carried.clone()

    def tensors(self) -> dict[str, Tensor]:
        return {"carried_mean.carried": self.carried}

    def load_tensors(self, tensors: Mapping[str, Tensor]) -> None:
        self.carried = tensors["carried_mean.carried"].to(self.device).clone()

    def report(self) -> dict[str, Any]:
        return {"rounds_aggregated": self.rounds}

    def load_report(self, report: Mapping[str, Any]) -> None:
        self.rounds = int(report["rounds_aggregated"])


@pytest.fixture
def registered() -> Iterator[None]:
    register_attack(ZeroConfig)(ZeroUpdate)
    register_attack(NegatedMeanConfig)(NegatedMean)
    register_aggregator(FirstRowConfig)(FirstRow)
    register_aggregator(HalveConfig)(Halve)
    register_aggregator(CarriedMeanConfig)(CarriedMean)
    yield
    for kind in ("test_zero", "test_negated_mean"):
        ATTACKS.unregister(kind)
    for kind in ("test_first_row", "test_halve", "test_carried_mean"):
        AGGREGATORS.unregister(kind)


def _run(tmp_path: Path, name: str, **overrides: Any) -> tuple[Engine, Tensor]:
    out = tmp_path / name
    tree = tiny_config(**{"clients_per_round": 6, "data__clients": 12, "model": MLP, **overrides})
    engine = Engine(parse_config(tree), out_dir=out, db_path=out / "runs.db")
    engine.run()
    return engine, final_weights(out)


def test_an_own_attack_registered_here_runs_and_is_named(tmp_path: Path, registered: None) -> None:
    ZeroUpdate.seen.clear()
    engine, _ = _run(tmp_path, "zero", attack={"kind": "test_zero", "fraction": 0.25})
    assert engine.attack is not None
    assert sorted(set(ZeroUpdate.seen)) == sorted(c for c in set(ZeroUpdate.seen) if c in engine.attack.malicious)
    assert len(ZeroUpdate.seen) == engine.attack.attacks_seen > 0
    summary = json.loads((tmp_path / "zero" / "summary.json").read_text())
    assert summary["attack"]["kind"] == "test_zero" and summary["attack"]["malicious_turns"] == len(ZeroUpdate.seen)


def test_an_own_omniscient_attack_reads_every_honest_row(tmp_path: Path, registered: None) -> None:
    NegatedMean.read.clear()
    engine, _ = _run(tmp_path, "neg", rounds=1, attack={"kind": "test_negated_mean", "fraction": 0.25})
    assert engine.attack is not None and engine.attack.attackers
    (rows,) = NegatedMean.read
    assert rows.shape[0] == 6 - len(engine.attack.attackers)  # the round's honest clients, each once
    assert bool((rows.norm(dim=1) > 0).all())


def test_an_own_rule_registered_here_runs_and_is_named(tmp_path: Path, registered: None) -> None:
    _, first = _run(tmp_path, "first", rounds=1, aggregator={"kind": "test_first_row"})
    summary = json.loads((tmp_path / "first" / "summary.json").read_text())
    assert summary["aggregator"] == {"kind": "test_first_row", "memory_mb": 512.0, "failed_rounds": []}
    _, halved = _run(tmp_path, "halve", rounds=1, aggregator={"kind": "test_halve"})
    _, mean = _run(tmp_path, "mean", rounds=1)
    _, initial = _run(tmp_path, "none", rounds=1, algorithm={"kind": "fedavg", "lr": 1e-12})
    torch.testing.assert_close(halved - initial, 0.5 * (mean - initial), rtol=1e-4, atol=1e-6)
    assert float((first - mean).abs().max()) > 1e-4 and float((first - initial).abs().max()) > 1e-4


def test_an_own_rules_state_survives_a_kill_and_resume(tmp_path: Path, registered: None) -> None:
    """The rule's tensors and its report go into every checkpoint and come back on resume: the resumed run
    ends with the uninterrupted one's weights, carried tensor and count (a fresh rule would count 2, not 5)."""
    tree = tiny_config(rounds=5, clients_per_round=6, data__clients=12, model=MLP, checkpoint={"every": 1})
    tree["aggregator"] = {"kind": "test_carried_mean"}
    cfg = parse_config(tree)
    whole = Engine(cfg, tmp_path / "whole", tmp_path / "whole" / "runs.db")
    whole.run()
    cut = Engine(cfg, tmp_path / "cut", tmp_path / "cut" / "runs.db")
    cut.run(after_round=lambda row: row.round == 2)
    resumed = Engine(cfg, tmp_path / "cut", tmp_path / "cut" / "runs.db", resume=True)
    resumed.run()
    assert torch.equal(resumed.global_state, whole.global_state)
    rules = [engine.robust.rule for engine in (whole, resumed) if engine.robust is not None]
    assert [r.rounds for r in rules] == [5, 5]  # type: ignore[attr-defined]
    assert torch.equal(rules[1].carried, rules[0].carried)  # type: ignore[attr-defined]
    summaries = [json.loads((tmp_path / run / "summary.json").read_text()) for run in ("whole", "cut")]
    assert [s["aggregator"]["rounds_aggregated"] for s in summaries] == [5, 5]


def test_own_stages_are_checked_by_their_declared_properties(registered: None) -> None:
    with pytest.raises(ConfigError, match="needs every update, which secagg hides"):
        parse_config(
            tiny_config(
                aggregator={"kind": "test_first_row"},
                secagg={"kind": "secagg_plus", "num_shares": 3, "reconstruction_threshold": 2},
            )
        )
    with pytest.raises(ConfigError, match="test_negated_mean reads the honest updates"):
        parse_config(
            tiny_config(
                attack={"kind": "test_negated_mean", "fraction": 0.2},
                privacy={"kind": "central", "clip": 1.0, "noise_multiplier": 1.0},
            )
        )
    dp = {"kind": "central", "clip": 1.0, "noise_multiplier": 1.0}
    parse_config(tiny_config(aggregator={"kind": "test_halve"}, privacy=dp))  # keeps the clip: allowed


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"attack": {"kind": "label_flip", "fraction": 0.2, "scale": 3}}, "unknown key 'attack.scale'; allowed here:"
         " kind, factory, fraction"),
        ({"aggregator": {"kind": "median", "trim": 0.1}}, "unknown key 'aggregator.trim'; allowed here: kind,"
         " factory, memory_mb"),
        ({"aggregator": {"kind": "average"}}, "aggregator.kind: Input should be"),
        ({"attack": {"factory": "examples/nowhere.py:X", "fraction": 0.2}}, "attack.factory: no file"),
        ({"attack": {"factory": "examples/own_rule.py:MeaMed", "fraction": 0.2}}, "attack.factory: examples/own_rule"
         ".py:MeaMed is not a registered attack"),
        ({"attack": {"factory": "examples/own_attack.py:Nope", "fraction": 0.2}}, "has no attribute 'Nope'"),
        ({"attack": {"factory": "examples/own_attack.py:Mimic", "kind": "min_sum", "fraction": 0.2}},
         "attack.kind=min_sum but examples/own_attack.py:Mimic is registered as 'mimic'"),
    ],
)  # fmt: skip
def test_a_bad_stage_section_is_one_line(section: dict[str, Any], message: str, monkeypatch: Any) -> None:
    monkeypatch.chdir(ROOT)
    with pytest.raises(ConfigError) as error:
        parse_config(tiny_config(**section))
    assert message in str(error.value) and "\n" not in str(error.value)


# ------------------------------------------------------------------------------------------ the examples


def _example(name: str, monkeypatch: Any) -> Any:
    """The example module, imported as a YAML factory imports it."""
    monkeypatch.chdir(ROOT)
    section = "attack" if name == "own_attack" else "aggregator"
    builder = "Mimic" if name == "own_attack" else "MeaMed"
    extra = {"fraction": 0.2} if section == "attack" else {}
    parse_config(tiny_config(**{section: {"factory": f"examples/{name}.py:{builder}", **extra}}))
    return sys.modules[name]


def _honest(rows: np.ndarray) -> HonestUpdates:
    x = torch.from_numpy(rows)
    moments = torch.cat([x.sum(0), (x * x).sum(0), torch.tensor([float(len(x))], dtype=torch.float64)])
    return HonestUpdates(moments, x.float(), len(x) + 2, 2)


def test_mimic_copies_the_honest_update_farthest_along_the_top_principal_direction(monkeypatch: Any) -> None:
    """Karimireddy et al.'s choice, i* = argmax_i |<z, g_i - mean>| with z the top principal direction, here
    from numpy's SVD of the centred rows (the example goes through the Gram matrix's eigenvectors)."""
    own = _example("own_attack", monkeypatch)
    rng = np.random.default_rng(8)
    for _ in range(5):
        rows = rng.normal(size=(9, 6)) * np.array([5.0, 1, 1, 1, 1, 1])
        centred = rows - rows.mean(0)
        z = np.linalg.svd(centred)[2][0]
        expected = int(np.argmax(np.abs(centred @ z)))
        sent = own.Mimic(own.MimicConfig(fraction=0.2), None).craft(_honest(rows)).double().numpy()
        np.testing.assert_allclose(sent, rows[expected], rtol=1e-6)


def test_meamed_is_the_mean_of_the_values_nearest_the_median(monkeypatch: Any) -> None:
    own = _example("own_rule", monkeypatch)
    rows = np.array([[0.0, 5.0], [1.0, -1.0], [2.0, 0.0], [9.0, 0.5], [3.0, 100.0]], dtype=np.float32)
    weights = np.array([1.0, 2.0, 1.0, 1.0, 3.0], dtype=np.float32)
    # by hand, byzantine = 2, keep 3: column 0 (median 2): 2, then 1 and 3 (both 1 away), weights 1, 2, 3 ->
    # (2 + 2 + 9) / 6; column 1 (median 0.5): 0.5, 0, -1, weights 1, 1, 2 -> (0.5 + 0 - 2) / 4
    expected = np.array([(2 * 1 + 1 * 2 + 3 * 3) / 6, (0.5 * 1 + 0 * 1 - 1 * 2) / 4])
    gathered = GatheredRows(range(5), 2, 1 << 20, Path("unused"), torch.device("cpu"))
    gathered.put_(list(range(5)), torch.from_numpy(rows), torch.from_numpy(weights))
    out = own.MeaMed(own.MeaMedConfig(byzantine=2), 2, torch.device("cpu")).aggregate(gathered)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


FEDADAM = {"server_optimizer": {"kind": "fedadam", "lr": 0.01}}


@pytest.mark.parametrize(
    ("section", "value"),
    [
        ("attack", {"factory": "examples/own_attack.py:Mimic", "fraction": 0.25}),
        ("aggregator", {"factory": "examples/own_rule.py:MeaMed", "byzantine": 1}),
    ],
)
@pytest.mark.slow
def test_the_examples_run_on_one_and_two_ranks_and_both_executors_beside_fedadam(
    section: str, value: dict[str, Any], tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.chdir(ROOT)
    attack = {"attack": {"kind": "sign_flip", "fraction": 0.25, "scale": 3.0}} if section == "aggregator" else {}
    tree = tiny_config(model=MLP, clients_per_round=8, data__clients=16, **FEDADAM, **attack, **{section: value})
    one, two = on_one_and_two_ranks(tree, tmp_path)
    torch.testing.assert_close(two, one, rtol=0, atol=2e-5)
    summary = json.loads((tmp_path / "ranks2" / "summary.json").read_text())
    assert summary[section]["factory"] == value["factory"] and summary[section]["kind"] in ("mimic", "meamed")
    fused_executor = {"kind": "fused", "clients": 3}
    _, fused = _run(tmp_path, "fused", **FEDADAM, executor=fused_executor, **attack, **{section: value})
    _, sequential = _run(tmp_path, "sequential", **FEDADAM, **attack, **{section: value})
    torch.testing.assert_close(fused, sequential, rtol=0, atol=2e-5)


@pytest.mark.slow
@pytest.mark.parametrize("script", ["own_attack.py", "own_rule.py"])
def test_the_examples_run_from_python(script: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2 and all("final_accuracy=" in line for line in lines)
