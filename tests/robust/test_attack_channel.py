"""Attackers through the channel: every built-in attack's message passes the uplink compressor as an honest
client's does, so under top-k an attacker's row holds as many non-zeros as anyone's; an omniscient attacker
keeps its own error-feedback state, which a checkpoint keeps."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
import torch
from torch import Tensor

from fedsim.config import AGGREGATORS, ATTACKS, ConfigError, parse_config, register_aggregator
from fedsim.config.robust import GatheringConfig
from fedsim.robust import Rule
from fedsim.robust.gather import GatheredRows
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config

MLP = {"kind": "mlp", "hidden": [16]}  # 64 * 16 + 16 + 16 * 10 + 10 = 1,210 entries: top-k 1% sends 13
SETTINGS: dict[str, dict[str, Any]] = {
    "backdoor": {"target": 1},
    "scale": {"scale": 10.0},
    "agr_tailored": {"against": "median"},
    "report_only": {"reported_loss": "high"},
}


class CountedConfig(GatheringConfig):
    kind: Literal["test_counted"] = "test_counted"


class Counted(Rule):
    """The mean of the rows the server received, each client's non-zeros noted."""

    seen: ClassVar[dict[int, list[int]]] = {}

    def aggregate(self, rows: GatheredRows) -> Tensor:
        for cid, row in zip(rows.cids, rows.rows, strict=True):
            Counted.seen.setdefault(cid, []).append(int((row != 0).sum()))
        return rows.rows.mean(0)


@pytest.fixture
def counted() -> Iterator[None]:
    register_aggregator(CountedConfig)(Counted)
    Counted.seen.clear()
    yield
    AGGREGATORS.unregister("test_counted")


def _tree(kind: str, **more: Any) -> dict[str, Any]:
    attack = {"kind": kind, "fraction": 0.25, **SETTINGS.get(kind, {})}
    tree = tiny_config(rounds=2, clients_per_round=6, data__clients=12, model=MLP, attack=attack, **more)
    return tree | {"uplink": {"kind": "topk", "fraction": 0.01}, "aggregator": {"kind": "test_counted"}}


@pytest.mark.parametrize("kind", [k for k in ATTACKS.kinds() if k != "none"])
def test_under_topk_an_attackers_row_has_as_many_nonzeros_as_an_honest_ones(
    kind: str, counted: None, tmp_path: Path
) -> None:
    engine = Engine(parse_config(_tree(kind)), tmp_path / kind, tmp_path / kind / "runs.db")
    engine.run()
    assert engine.attack is not None
    bad = {c: n for c, n in Counted.seen.items() if c in engine.attack.malicious}
    good = {c: n for c, n in Counted.seen.items() if c not in engine.attack.malicious}
    assert bad and good, Counted.seen
    assert {n for ns in good.values() for n in ns} == {13}  # ceil(1% of 1,210)
    assert {n for ns in bad.values() for n in ns} == {13}, bad
    summary = json.loads((tmp_path / kind / "summary.json").read_text())["attack"]
    if type(engine.attack.cfg).reads_honest:
        assert "sent through the uplink compressor" in summary["channel"]


def test_an_omniscient_attackers_error_feedback_is_its_own_and_survives_a_resume(counted: None, tmp_path: Path) -> None:
    tree = _tree("ipm", checkpoint={"every": 1}) | {"rounds": 4}
    cfg = parse_config(tree)
    whole = Engine(cfg, tmp_path / "whole", tmp_path / "whole" / "runs.db")
    whole.run()
    assert whole.attack is not None and whole.attack.channel  # each attacker's residual, kept by the attack
    residuals = {cid: state["residual"] for cid, state in whole.attack.channel.items()}
    assert all(0 < int((r != 0).sum()) < r.numel() for r in residuals.values())  # what top-k left unsent
    cut = Engine(cfg, tmp_path / "cut", tmp_path / "cut" / "runs.db")
    cut.run(after_round=lambda row: row.round == 1)
    resumed = Engine(cfg, tmp_path / "cut", tmp_path / "cut" / "runs.db", resume=True)
    resumed.run()
    assert torch.equal(resumed.global_state, whole.global_state)
    assert resumed.attack is not None
    assert {c: s["residual"] for c, s in resumed.attack.channel.items()}.keys() == residuals.keys()
    assert all(torch.equal(resumed.attack.channel[c]["residual"], r) for c, r in residuals.items())


def test_an_omniscient_attacker_beside_error_feedback_on_two_ranks_is_refused(tmp_path: Path) -> None:
    """Its state lives on the rank that trained it; the engine asks with the pool's ranks (torchrun's world)."""
    engine = Engine(parse_config(_tree("ipm") | {"aggregator": {"kind": "none"}}), tmp_path, tmp_path / "runs.db")
    assert engine.attack is not None
    engine.attack.check_channel(stateful=True, ranks=1)  # one rank: every attacker's state is here
    engine.attack.check_channel(stateful=False, ranks=2)  # no memory: nothing to keep
    with pytest.raises(ConfigError, match="run it on one rank, not 2"):
        engine.attack.check_channel(stateful=True, ranks=2)
