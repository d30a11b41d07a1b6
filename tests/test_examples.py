"""Every example config in examples/ is valid as what it is: a run, a sweep or a split fine-tuning run."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedsim.config import load_config
from fedsim.split.config import load_split_config
from fedsim.sweep.grid import load_sweep

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_config_validates(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(EXAMPLES.parent)  # own_attack.yaml and own_rule.yaml name their files from the root
    if path.name == "sweep.yaml":
        cfg, runs = load_sweep(path)
        assert len(runs) == 12 and sum(cfg.types.values()) == 6
    elif path.name.startswith("split"):
        load_split_config(path)
    else:
        assert load_config(path).rounds >= 1
