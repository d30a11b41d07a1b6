"""The compatibility checks over a grid of 2268 combinations of attack, rule, privacy, SecAgg+, compressor and
cohort (tests/config/refusal_grid.py), against rules stated here from what each stage needs: a config is refused
exactly when one of them applies, in one line that names the sections in conflict."""

from __future__ import annotations

import itertools
import json
from typing import Any

from tests.config.refusal_grid import ATTACKS, COHORTS, POPULATION, PRIVACY, RULES, SECAGG, UPLINK, grid

# rules the server runs over every update it sees: SecAgg+ shows it only the sum
SERVER_SIDE = {"median", "trimmed_mean", "krum", "multi_krum", "bulyan", "geometric_median"}
# rules whose guarantee assumes fewer than half the updates are malicious; norm bounding bounds each update alone
MINORITY = SERVER_SIDE | {"centered_clip"}


def withstands(rule: dict[str, Any], n: int) -> int | None:
    """The attackers in a round of ``n`` a rule is built for: Krum, Multi-Krum and Bulyan their stated f
    (Blanchard et al. 2017; El Mhamdi et al. 2018), the trimmed mean floor(beta n) from each end (Yin et al.
    2018), the median, geometric median and centered clipping fewer than half (breakdown point 1/2)."""
    kind = rule.get("kind")
    if kind in ("krum", "multi_krum", "bulyan"):
        return int(rule["byzantine"])
    if kind == "trimmed_mean":
        return int(rule["trim"] * n)
    return (n - 1) // 2 if kind in ("median", "geometric_median", "centered_clip") else None


def least_cohort(rule: dict[str, Any]) -> int:
    """Krum and Multi-Krum need n >= 2f + 3, Bulyan n >= 4f + 3; Multi-Krum averages ``selected`` of them."""
    f = int(rule.get("byzantine", 0))
    return {"krum": 2 * f + 3, "multi_krum": max(2 * f + 3, rule.get("selected") or 0), "bulyan": 4 * f + 3}.get(
        str(rule.get("kind")), 1
    )


def conflicts(
    attack: dict[str, Any], rule: dict[str, Any], privacy: dict[str, Any], secagg: bool, uplink: str | None, n: int
) -> list[tuple[str, ...]]:
    """Each reason the combination cannot run, as the words its refusal must contain."""
    a, r, p = attack.get("kind"), rule.get("kind", "mean"), privacy.get("kind")
    found: list[tuple[str, ...]] = []
    if secagg and uplink:  # a masked update is uniformly random: nothing to compress
        found.append(("secagg", f"uplink.kind={uplink}"))
    if p == "local" and uplink:  # dense noise on each message
        found.append(("privacy.kind=local", f"uplink.kind={uplink}"))
    if a in ("alie", "ipm") and (p or secagg):  # an omniscient attacker reads the honest clients' updates
        found.append((f"attack.kind={a}",))
    if r in SERVER_SIDE and secagg:
        found.append((f"aggregator.kind={r}", "secagg"))
    if p and r not in ("mean", "norm_bound"):  # DP's sensitivity is that of a sum of clipped updates
        found.append((f"aggregator.kind={r}", "privacy"))
    if a and attack["fraction"] >= 0.5 and r in MINORITY:
        found.append(("attack.fraction", f"aggregator.kind={r}"))
    if n < least_cohort(rule):
        found.append(("aggregator.",))
    limit = withstands(rule, n)
    if a and limit is not None and n * round(attack["fraction"] * POPULATION) / POPULATION > limit:
        found.append(("attack.fraction", f"aggregator.kind={r}"))
    return found


def test_a_combination_is_refused_exactly_when_a_stated_rule_applies_in_one_line_naming_it() -> None:
    said = grid()
    for attack, rule, privacy, secagg, uplink, n in itertools.product(ATTACKS, RULES, PRIVACY, SECAGG, UPLINK, COHORTS):
        tree = {"attack": attack, "aggregator": rule, "clients_per_round": n}
        key = json.dumps(tree | {"privacy": privacy, "secagg": secagg, "uplink": uplink}, sort_keys=True)
        reasons = conflicts(attack, rule, privacy, bool(secagg), uplink.get("kind"), n)
        message = said[key]
        assert (message is None) == (not reasons), (key, message, reasons)
        if message is not None:
            assert "\n" not in message, message
            named = [i for i, words in enumerate(reasons) if all(w in message for w in words)]
            assert named, (key, message, reasons)
    assert len(said) == 2268


def test_every_stated_rule_refuses_somewhere_in_the_grid() -> None:
    """The grid exercises each rule above: none of them is vacuous."""
    said = grid()
    kinds = {
        "compressed secagg": "a masked update is dense",
        "local DP compressed": "adds dense noise",
        "omniscient": "reads the honest updates",
        "server-side rule under secagg": "which secagg hides from the server",
        "rule beside DP": "beside privacy is not supported",
        "majority": "assumes a minority",
        "small cohort": "exceeds the cohort",
        "beyond tolerance": "withstands 1",
    }
    messages = [m for m in said.values() if m is not None]
    assert {name for name, words in kinds.items() if any(words in m for m in messages)} == set(kinds)
    assert any(m is None for m in said.values())


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
