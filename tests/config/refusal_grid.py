"""A grid of run configs that combine the stages over client updates, and the one-line refusal each gets
(tests/config/test_refusals.py states, rule by rule, which combinations must be refused)."""

from __future__ import annotations

import itertools
import json
from typing import Any

from fedsim.config import ConfigError, parse_config

ATTACKS: list[dict[str, Any]] = [
    {},
    {"kind": "sign_flip", "fraction": 0.2},
    {"kind": "gaussian", "fraction": 0.6},
    {"kind": "alie", "fraction": 0.2},
    {"kind": "ipm", "fraction": 0.6},
    {"kind": "label_flip", "fraction": 0.2},
    {"kind": "backdoor", "fraction": 0.2},
]
RULES: list[dict[str, Any]] = [
    {},
    {"kind": "median"},
    {"kind": "trimmed_mean", "trim": 0.2},
    {"kind": "krum", "byzantine": 1},
    {"kind": "multi_krum", "byzantine": 1, "selected": 9},
    {"kind": "bulyan", "byzantine": 1},
    {"kind": "geometric_median"},
    {"kind": "norm_bound", "bound": 2.0},
    {"kind": "centered_clip", "radius": 0.5},
]
PRIVACY: list[dict[str, Any]] = [
    {},
    {"kind": "central", "clip": 1.0, "noise_multiplier": 1.0},
    {"kind": "local", "clip": 1.0, "noise_multiplier": 1.0},
]
SECAGG: list[dict[str, Any]] = [{}, {"kind": "secagg_plus", "num_shares": 3, "reconstruction_threshold": 2}]
UPLINK: list[dict[str, Any]] = [{}, {"kind": "topk"}, {"kind": "qsgd"}]
COHORTS = [6, 10]


POPULATION = 20


def grid() -> dict[str, str | None]:
    """Each combination, as compact JSON, to its refusal (None when the config is accepted)."""
    out: dict[str, str | None] = {}
    for attack, rule, privacy, secagg, uplink, cohort in itertools.product(
        ATTACKS, RULES, PRIVACY, SECAGG, UPLINK, COHORTS
    ):
        tree = {
            "data": {"dataset": "digits", "clients": POPULATION},
            "clients_per_round": cohort,
            "attack": attack,
            "aggregator": rule,
            "privacy": privacy,
            "secagg": secagg,
            "uplink": uplink,
        }
        key = json.dumps({k: v for k, v in tree.items() if k != "data"}, sort_keys=True)
        try:
            parse_config(tree)
            out[key] = None
        except ConfigError as exc:
            out[key] = str(exc)
    return out
