"""The compatibility checks derived from the stages' declared properties refuse what the hand-written pairs
refused, with the same one-line messages, over a grid of 2268 combinations (tests/config/refusal_grid.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.config.refusal_grid import grid

BEFORE = Path(__file__).with_name("refused_before.json")


def test_the_refused_combinations_are_those_refused_before() -> None:
    before = json.loads(BEFORE.read_text())
    after = grid()
    assert after.keys() == before.keys()
    changed = {key: (before[key], after[key]) for key in before if before[key] != after[key]}
    # refused on purpose since (issue 46): more attackers in an average round than the rule withstands, and a
    # malicious majority beside the trimmed mean, the geometric median and centered clipping (which assume a
    # minority too); nothing refused before is accepted now
    on_purpose = ("attackers in an average round of", "assumes a minority of attackers")
    assert all(new is not None and any(reason in new for reason in on_purpose) for _, new in changed.values())
    assert sum(old is None for old, _ in changed.values()) == 98 and len(changed) == 138
    assert any("aggregator.kind=krum withstands 1" in (new or "") for _, new in changed.values())
    refused = sum(message is not None for message in after.values())
    assert refused == 1916  # of 2268: the grid does exercise the checks
    assert any("reads the honest updates" in (m or "") for m in after.values())
    assert any("assumes a minority" in (m or "") for m in after.values())


def test_a_config_json_saved_before_the_stages_had_their_own_settings_still_resumes() -> None:
    """config.json of a run written by the previous version holds every kind's settings in each stage section."""
    import pytest

    from fedsim.config import ConfigError, parse_config
    from fedsim.config.run import saved_tree
    from tests.conftest import tiny_config

    old = tiny_config(
        aggregator={"kind": "median", "trim": 0.1, "byzantine": 0, "selected": None, "memory_mb": 512.0},
        attack={"kind": "sign_flip", "fraction": 0.2, "scale": 3.0, "std": 1.0, "z": None, "target": 0},
        uplink={"kind": "none", "fraction": 0.01, "rank": 4, "levels": 16},
        downlink={"kind": "qsgd", "fraction": 0.01, "rank": 4, "levels": 8},
    )
    with pytest.raises(ConfigError, match="unknown key"):
        parse_config(old)
    cfg = parse_config(saved_tree(old))
    assert cfg.aggregator.kind == "median" and cfg.attack.settings()["scale"] == 3.0
    assert cfg.downlink.settings() == {"kind": "qsgd", "levels": 8, "bucket": 512, "elias": False}
    assert parse_config(cfg.model_dump(mode="json")) == cfg  # today's config.json reads back as it was


# accepted before (a4f7a03: the setting was silently ignored), refused now
REFUSED_ON_PURPOSE: list[tuple[dict[str, Any], str]] = [
    ({"aggregator": {"kind": "median", "trim": 0.2}}, "unknown key 'aggregator.trim'; allowed here: kind, factory"),
    ({"uplink": {"kind": "topk", "rank": 2}}, "unknown key 'uplink.rank'; allowed here: kind, factory, fraction"),
    ({"attack": {"kind": "label_flip", "fraction": 0.2, "scale": 3.0}}, "unknown key 'attack.scale'"),
    ({"privacy": {"clip": 1.0}}, "privacy.clip is set but privacy.kind is none"),
    ({"downlink": {"kind": "qsgd", "min_compression": 1}}, "unknown key 'downlink.min_compression'"),
]  # fmt: skip


def test_a_setting_of_another_kind_is_refused_now_on_purpose() -> None:
    import pytest

    from fedsim.config import ConfigError, parse_config
    from tests.conftest import tiny_config

    for section, message in REFUSED_ON_PURPOSE:
        with pytest.raises(ConfigError) as refused:
            parse_config(tiny_config(**section))
        assert message in str(refused.value)
