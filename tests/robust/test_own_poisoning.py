"""A data-poisoning attack of your own on the DataPoisoning protocol: Tolpegin et al.'s (ESORICS 2020) targeted
label flip, source class to target class, registered here; the built-in label flip and backdoor on the same
protocol; a kind that declares poisons_data without it is one error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar, Literal

import pytest
import torch
from pydantic import Field

from fedsim.config import ATTACKS, AttackConfig, ConfigError, parse_config, register_attack
from fedsim.data.base import ClientData
from fedsim.robust import ModelPoisoning
from fedsim.robust.attack import AttackContext, DataPoisoning
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config


class TargetedFlipConfig(AttackConfig):
    kind: Literal["test_targeted_flip"] = "test_targeted_flip"
    source: int = Field(1, ge=0)
    target: int = Field(7, ge=0)
    poisons_data: ClassVar[bool] = True
    needs_classes: ClassVar[bool] = True


class TargetedFlip(DataPoisoning):
    cfg: TargetedFlipConfig

    def poison_data(self, data: ClientData, cid: int, classes: int) -> ClientData:
        y = data.y.clone()
        y[y == self.cfg.source] = self.cfg.target
        return ClientData(data.x, y)


class BrokenConfig(AttackConfig):
    kind: Literal["test_broken_poison"] = "test_broken_poison"
    poisons_data: ClassVar[bool] = True


@pytest.fixture
def registered() -> Iterator[None]:
    register_attack(TargetedFlipConfig)(TargetedFlip)
    register_attack(BrokenConfig)(ModelPoisoning)
    yield
    ATTACKS.unregister("test_targeted_flip")
    ATTACKS.unregister("test_broken_poison")


def _engine(tmp_path: Path, name: str, attack: dict[str, object]) -> Engine:
    tree = tiny_config(rounds=2, data__clients=12, attack=attack)
    return Engine(parse_config(tree), tmp_path / name, tmp_path / name / "runs.db")


def test_an_own_targeted_flip_poisons_only_the_malicious_clients_source_labels(
    tmp_path: Path, registered: None
) -> None:
    clean = _engine(tmp_path, "clean", {})
    engine = _engine(tmp_path, "flip", {"kind": "test_targeted_flip", "fraction": 0.25})
    malicious = engine.attack.malicious  # type: ignore[union-attr]
    assert len(malicious) == 3
    for cid in range(12):
        before, after = clean.dataset.client(cid), engine.dataset.client(cid)
        expected = before.y.clone()
        if cid in malicious:
            expected[expected == 1] = 7
        assert torch.equal(after.y, expected) and torch.equal(after.x, before.x)
    assert any(bool((clean.dataset.client(c).y == 1).any()) for c in malicious)  # the flip had labels to change
    engine.run()
    assert engine.attack.attacks_seen > 0  # type: ignore[union-attr]


def test_the_built_in_label_flip_and_backdoor_are_data_poisoning(tmp_path: Path) -> None:
    for attack in ({"kind": "label_flip", "fraction": 0.25}, {"kind": "backdoor", "fraction": 0.25, "target": 3}):
        engine = _engine(tmp_path, str(attack["kind"]), attack)
        assert isinstance(engine.attack.poisoning, DataPoisoning)  # type: ignore[union-attr]
    context = AttackContext(0, 12, 4, torch.device("cpu"))
    flip = ATTACKS.build(ATTACKS.parse({"kind": "label_flip", "fraction": 0.25}), context)
    data = ClientData(torch.zeros(3, 2), torch.tensor([0, 4, 9]))
    assert flip.poison_data(data, 0, 10).y.tolist() == [9, 5, 0]  # classes - 1 - y


def test_poisons_data_without_the_protocol_is_one_error(tmp_path: Path, registered: None) -> None:
    with pytest.raises(ConfigError, match="declares poisons_data, but its builder returns a ModelPoisoning"):
        _engine(tmp_path, "broken", {"kind": "test_broken_poison", "fraction": 0.25})
