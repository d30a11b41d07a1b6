"""A DP mechanism of your own, registered from this file, is built through the registry, runs in the stage's
place, is accounted by what it declares (``local``), and is named in summary.json."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import ClassVar, Literal

import pytest
from torch import Tensor

from fedsim.config import PRIVACY, ConfigError, parse_config, register_privacy
from fedsim.config.privacy import CentralDP
from fedsim.privacy.dp import DifferentialPrivacy
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config


class CountedConfig(CentralDP):
    kind: Literal["test_counted"] = "test_counted"  # type: ignore[assignment]
    local: ClassVar[bool] = False


class Counted(DifferentialPrivacy):
    """The central Gaussian mechanism, counting the rows it clips."""

    clipped: ClassVar[list[int]] = []

    def clip_(self, rows: Mapping[str, Tensor]) -> Tensor:
        Counted.clipped.append(next(iter(rows.values())).shape[0])
        return super().clip_(rows)


@pytest.fixture
def counted() -> Iterator[None]:
    register_privacy(CountedConfig)(lambda settings, cfg, population, initial: Counted(cfg, population, initial))
    yield
    PRIVACY.unregister("test_counted")


def test_an_own_mechanism_runs_in_the_stages_place(tmp_path: Path, counted: None) -> None:
    Counted.clipped.clear()
    privacy = {"kind": "test_counted", "clip": 0.5, "noise_multiplier": 1.0}
    tree = tiny_config(rounds=2, privacy=privacy, executor={"kind": "fused", "clients": 2})
    engine = Engine(parse_config(tree), out_dir=tmp_path / "out", db_path=tmp_path / "runs.db")
    engine.run()
    assert sum(Counted.clipped) == 10 and max(Counted.clipped) == 2  # 5 clients a round, 2 at a time
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["privacy"]["kind"] == "test_counted"
    assert summary["privacy"]["neighbours"] == "replace-one"  # a fixed-size partial cohort, accounted centrally
    central = Engine(
        parse_config(tiny_config(rounds=2, privacy=privacy | {"kind": "central"})), tmp_path / "c", tmp_path / "c.db"
    )
    central.run()
    assert summary["privacy"]["epsilon"] == pytest.approx(central.privacy.epsilon(2))  # type: ignore[union-attr]


def test_a_setting_under_no_privacy_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"privacy\.clip is set but privacy\.kind is none"):
        parse_config(tiny_config(privacy={"clip": 1.0}))
