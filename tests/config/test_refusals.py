"""The compatibility checks derived from the stages' declared properties refuse what the hand-written pairs
refused, with the same one-line messages, over a grid of 2268 combinations (tests/config/refusal_grid.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.config.refusal_grid import grid

BEFORE = Path(__file__).with_name("refused_before.json")


def test_the_refused_combinations_are_those_refused_before() -> None:
    before = json.loads(BEFORE.read_text())
    after = grid()
    assert after.keys() == before.keys()
    changed = {key: (before[key], after[key]) for key in before if before[key] != after[key]}
    assert changed == {}
    refused = sum(message is not None for message in after.values())
    assert refused == 1818  # of 2268: the grid does exercise the checks
    assert any("reads the honest updates" in (m or "") for m in after.values())
    assert any("assumes a minority" in (m or "") for m in after.values())
