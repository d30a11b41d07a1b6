"""Simulated attackers: each attack is its paper's formula on fixed inputs, the malicious clients are fixed by
the seed and recorded per round, data poisoning alters only their data, and the settings that cannot work are
refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedsim.config import ConfigError, parse_config
from fedsim.robust.attack import Attack, AttackContext, malicious_clients
from fedsim.robust.attacks.alie import alie_z
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from tests.conftest import on_one_and_two_ranks, refused, tiny_config

MLP = {"kind": "mlp", "hidden": [16]}


def _attack(tmp_path: Path, **attack: Any) -> Attack:
    cfg = parse_config(tiny_config(data__clients=40, attack={"fraction": 0.25, **attack}))
    return Attack(cfg.attack, AttackContext(cfg.seed, 40, 6, torch.device("cpu")), tmp_path / "honest.f32")


SETTINGS = {"sign_flip": {"scale": 3.0}, "scale": {"scale": 3.0}, "gaussian": {"std": 0.5}, "ipm": {"epsilon": 0.2}}


def _engine(tmp_path: Path, name: str, **overrides: Any) -> Engine:
    out = tmp_path / name
    tree = tiny_config(**{"clients_per_round": 8, "data__clients": 16, "model": MLP, **overrides})
    return Engine(parse_config(tree), out_dir=out, db_path=out / "runs.db")


def test_the_malicious_clients_are_a_fixed_share_of_the_population() -> None:
    chosen = malicious_clients(5, 1000, 0.2)
    assert len(chosen) == 200 and chosen == malicious_clients(5, 1000, 0.2) != malicious_clients(6, 1000, 0.2)
    assert all(0 <= c < 1000 for c in chosen)


def test_alies_z_is_the_papers() -> None:
    # n = 20 clients, 4 malicious: s = floor(20 / 2 + 1) - 4 = 7 to out-vote, z = Phi^-1(13 / 20) = 0.38532
    assert alie_z(20, 4) == pytest.approx(0.385320, abs=1e-6)
    assert alie_z(50, 10) == pytest.approx(0.467699, abs=1e-6)  # s = 16, Phi^-1(34 / 50)


@pytest.mark.parametrize("kind", ["sign_flip", "scale", "gaussian", "alie", "ipm"])
def test_each_model_poisoning_attack_is_its_formula(kind: str, tmp_path: Path) -> None:
    attack = _attack(tmp_path, kind=kind, **SETTINGS.get(kind, {}))
    bad = sorted(attack.malicious)[:2]
    good = [c for c in range(40) if c not in attack.malicious][:5]
    cids = [good[0], bad[0], *good[1:3], bad[1], *good[3:]]
    attack.begin_round(0, cids, [])
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(len(cids), 6)).astype(np.float32)
    update = torch.from_numpy(rows.copy())
    attack.apply_(cids, update, torch.ones(len(cids)))
    malicious = [k for k, c in enumerate(cids) if c in attack.malicious]
    honest = [k for k in range(len(cids)) if k not in malicious]
    np.testing.assert_array_equal(update[honest].numpy(), rows[honest])  # honest rows untouched
    if kind == "sign_flip":
        np.testing.assert_allclose(update[malicious].numpy(), -3.0 * rows[malicious])
    elif kind == "scale":
        np.testing.assert_allclose(update[malicious].numpy(), 3.0 * rows[malicious])
    elif kind == "gaussian":
        assert not np.allclose(update[malicious].numpy(), rows[malicious])
        assert float(update[malicious].std()) == pytest.approx(0.5, rel=0.6)
    else:
        assert float(update[malicious].abs().max()) == 0.0  # written after the round's honest updates are known
        mu, sigma = rows[honest].mean(0), rows[honest].std(0, ddof=1)
        expected = mu - alie_z(len(cids), 2) * sigma if kind == "alie" else -0.2 * mu
        crafted = attack.poisoning.craft(attack.honest_updates())
        np.testing.assert_allclose(crafted.numpy(), expected, rtol=1e-5, atol=1e-6)


def test_a_run_records_which_clients_attacked(tmp_path: Path) -> None:
    engine = _engine(tmp_path, "attacked", attack={"kind": "sign_flip", "fraction": 0.25, "scale": 2.0})
    engine.run()
    assert engine.attack is not None
    with RunStore.open_readonly(tmp_path / "attacked" / "runs.db") as store:
        (run,) = store.list_runs()
        rows = store.rounds(run.run_id)
    attackers = [json.loads(r.metrics_json)["attackers"] for r in rows]
    assert any(attackers) and all(set(a) <= engine.attack.malicious for a in attackers)
    summary = json.loads((tmp_path / "attacked" / "summary.json").read_text())["attack"]
    assert summary["malicious_clients"] == 4 and summary["malicious_turns"] == sum(len(a) for a in attackers)


@pytest.mark.slow
def test_alie_on_two_ranks_writes_what_one_rank_does(tmp_path: Path) -> None:
    tree = tiny_config(model=MLP, clients_per_round=8, data__clients=16, attack={"kind": "alie", "fraction": 0.25})
    one, two = on_one_and_two_ranks(tree, tmp_path)
    torch.testing.assert_close(two, one, rtol=0, atol=2e-5)


def test_label_flips_and_backdoors_poison_only_the_malicious_clients_data(tmp_path: Path) -> None:
    flipped = _engine(tmp_path, "flip", attack={"kind": "label_flip", "fraction": 0.25}, model={"kind": "cnn"})
    assert flipped.attack is not None
    bad, good = min(flipped.attack.malicious), min(set(range(16)) - flipped.attack.malicious)
    inner = flipped.dataset.inner  # type: ignore[attr-defined]
    assert torch.equal(flipped.dataset.client(bad).y, 9 - inner.client(bad).y)
    assert torch.equal(flipped.dataset.client(good).y, inner.client(good).y)
    attack = {"kind": "backdoor", "fraction": 0.25, "target": 7, "poison_fraction": 0.5}
    engine = _engine(tmp_path, "backdoor", rounds=2, attack=attack, model={"kind": "cnn"})
    data, clean = engine.dataset.client(bad), engine.dataset.inner.client(bad)  # type: ignore[attr-defined]
    stamped = (data.x != clean.x).flatten(1).any(1)
    assert int(stamped.sum()) == -(-clean.n_samples // 2) and bool((data.y[stamped] == 7).all())
    assert float(data.x[stamped][..., -3:, -3:].min()) == float(clean.x.max())
    engine.run()
    summary = json.loads((tmp_path / "backdoor" / "summary.json").read_text())["attack"]
    assert 0.0 <= summary["backdoor_success"] <= 1.0


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["attack.kind=sign_flip"], "needs attack.fraction"),
        (
            [
                "attack.kind=alie",
                "attack.fraction=0.2",
                "secagg.kind=secagg_plus",
                "secagg.num_shares=5",
                "secagg.reconstruction_threshold=3",
            ],
            "not beside",
        ),
        (["attack.kind=ipm", "attack.fraction=0.6", "aggregator.kind=krum"], "assumes a minority of attackers"),
        (["attack.kind=sign_flip", "attack.fraction=1.0"], "attack.fraction"),
        (["attack.kind=backdoor", "attack.fraction=0.2", "attack.target=10"], "attack.target=10 is not a class"),
    ],
)
def test_impossible_attack_settings_are_one_line_and_exit_2(
    tmp_path: Path, settings: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in refused(tmp_path, capsys, settings)


def test_a_backdoor_needs_image_like_inputs(tmp_path: Path) -> None:
    tree = {"attack": {"kind": "backdoor", "fraction": 0.25}, "data": {"dataset": "synthetic", "clients": 16}}
    with pytest.raises(ConfigError, match=r"stamps a 3x3 pixel trigger .* inputs have shape \(60,\)"):
        _engine(tmp_path, "flat", **tree)


@pytest.mark.parametrize("kind", ["alie", "ipm"])
def test_under_centered_clipping_each_omniscient_attacker_counts_once(kind: str, tmp_path: Path) -> None:
    """Hand-made rows through the client pipeline and finish_: the round's sum is each honest row and each
    attacker's update once, every one centered-clipped (Karimireddy et al.): sum_i w_i (c + clip(x_i - c, r))."""
    from fedsim.algorithms.group import ClientUpdates
    from fedsim.robust import RobustAggregation
    from fedsim.sim.rounds.upload import SumBuffer, UpdateStages, client_pipeline, upload

    cfg = parse_config(
        tiny_config(
            data__clients=40,
            attack={"kind": kind, "fraction": 0.25, **({"epsilon": 0.5} if kind == "ipm" else {})},
            aggregator={"kind": "centered_clip", "radius": 1.0},
        )
    )
    attack = Attack(cfg.attack, AttackContext(cfg.seed, 40, 3, torch.device("cpu")), tmp_path / "honest.f32")
    rule = RobustAggregation(cfg.aggregator, 3, torch.device("cpu"), tmp_path / "spill", announce=False)
    rule.load_state_dict({}, {"robust.centre": torch.tensor([3.0, 0.0, 0.0])})
    # (a placeholder zero row would clip to (2, 0, 0))
    bad = sorted(attack.malicious)[:2]
    good = [c for c in range(40) if c not in attack.malicious][:3]
    cids = [good[0], bad[0], good[1], bad[1], good[2]]
    rows = torch.tensor([[4.0, 0, 0], [9, 9, 9], [1, 2, 0], [9, 9, 9], [0.5, 0, 0]])
    weights = torch.tensor([1.0, 2.0, 1.0, 1.0, 3.0])
    attack.begin_round(0, cids, [])
    local = SumBuffer({"delta": 3, "weight": 1, "clients": 1, "unclipped": 1})
    updates = ClientUpdates({"delta": rows.clone()}, {"delta": weights.clone()}, {})
    upload(updates, cids, float(weights.sum()), local, client_pipeline(UpdateStages(robust=rule, attack=attack)))
    attack.finish_(lambda t: 0, local.segments, rule)

    def clipped(x: torch.Tensor) -> torch.Tensor:  # the paper's formula, written here
        centre = rule.tensors()["robust.centre"]
        d = x - centre
        return centre + d * min(1.0, 1.0 / max(float(d.norm()), 1e-30))

    honest = rows[[0, 2, 4]]
    mean = honest.mean(0)
    malicious = -0.5 * mean if kind == "ipm" else mean - alie_z(5, 2) * honest.std(0, unbiased=True)
    expected = sum(w * clipped(x) for w, x in zip(weights[[0, 2, 4]], honest, strict=True))
    expected = expected + (2.0 + 1.0) * clipped(malicious)  # the two attackers' weights, once each
    torch.testing.assert_close(local.segments["delta"], expected, rtol=1e-5, atol=1e-5)
