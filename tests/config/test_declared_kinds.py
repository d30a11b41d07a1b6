"""A kind registered from a file is treated exactly as the built-in with the same declarations: the same plan
lines, the same summary, the same refusals (under its own name) and the same trained weights; a kind that
declares nothing is assumed to read everything, so it is refused beside differential privacy.

The reference for "the same" is the built-in kind itself: each registered shape here declares what a built-in
declares and differs from it only in its name, so any difference in the plan, the summary, a refusal or the
weights can only come from code that reads a kind's name where it should read a declaration.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
import torch
from torch import Tensor

from fedsim.cli import main
from fedsim.comm.uplink.onebit import OneBitConfig
from fedsim.comm.uplink.topk import TopKConfig
from fedsim.config import (
    COMPRESSORS,
    PRIVACY,
    SELECTORS,
    ConfigError,
    PrivacyConfig,
    SelectionConfig,
    ServerStageConfig,
    parse_config,
)
from fedsim.config.server_stage import SERVER_STAGES
from fedsim.privacy.context import PrivacyContext
from fedsim.privacy.dp import DifferentialPrivacy
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.plan import round_plan
from fedsim.sim.selection import Uniform
from fedsim.sim.server_stages import ServerView, StageContext, Stateless
from tests.conftest import QUICKSTART, tiny_config

CENTRAL = {"clip": 1.0, "noise_multiplier": 1.0}


class OwnCentral(PrivacyConfig):
    """The Gaussian mechanism on the sum under a name of its own: it declares what ``central`` declares."""

    kind: Literal["own_central"] = "own_central"


class OwnLocal(PrivacyConfig):
    kind: Literal["own_local"] = "own_local"
    local: ClassVar[bool] = True


def own_gaussian(settings: PrivacyConfig, context: PrivacyContext, initial: Tensor | None) -> DifferentialPrivacy:
    return DifferentialPrivacy(settings, context, initial)


class OwnUniformConfig(SelectionConfig):
    """A uniform sample, declared as such: accepted wherever ``uniform`` is."""

    kind: Literal["own_uniform"] = "own_uniform"
    samples_uniformly: ClassVar[bool] = True
    reads_clients: ClassVar[bool] = False


class UndeclaredSelectorConfig(SelectionConfig):
    """Declares nothing: it may read what the clients reported and is not taken for a uniform sample."""

    kind: Literal["undeclared_selector"] = "undeclared_selector"


SEEN: dict[str, tuple[int, bool]] = {}  # a stage's kind -> (records it was shown, whether it was shown rows)


class UndeclaredStageConfig(ServerStageConfig):
    kind: Literal["undeclared_stage"] = "undeclared_stage"


class ModelOnlyStageConfig(ServerStageConfig):
    kind: Literal["model_only_stage"] = "model_only_stage"
    reads_records: ClassVar[bool] = False


class Looker(Stateless):
    """Notes what the round showed it; changes nothing."""

    def __init__(self, cfg: ServerStageConfig, context: StageContext) -> None:
        self.kind = cfg.kind

    def apply_(self, view: ServerView) -> bool:
        SEEN[self.kind] = (len(view.records), view.rows is not None)
        return False


class OwnTopK(TopKConfig):
    """Top-k under a name of its own: it declares the topk knob as the built-in does."""

    kind: Literal["own_topk"] = "own_topk"  # type: ignore[assignment]


class OwnOneBit(OneBitConfig):
    kind: Literal["own_onebit"] = "own_onebit"  # type: ignore[assignment]


@contextmanager
def registered() -> Iterator[None]:
    """Every shape of this file registered, and forgotten after, so that no other test sees them."""
    pairs: list[tuple[Any, type[Any], Any]] = [
        (PRIVACY, OwnCentral, own_gaussian),
        (PRIVACY, OwnLocal, own_gaussian),
        (SELECTORS, OwnUniformConfig, Uniform),
        (SELECTORS, UndeclaredSelectorConfig, Uniform),
        (SERVER_STAGES, UndeclaredStageConfig, Looker),
        (SERVER_STAGES, ModelOnlyStageConfig, Looker),
        (COMPRESSORS, OwnTopK, COMPRESSORS.entry("topk").build),  # type: ignore[union-attr]
        (COMPRESSORS, OwnOneBit, COMPRESSORS.entry("onebit").build),  # type: ignore[union-attr]
    ]
    for registry, config, build in pairs:
        registry.register(config)(build)
    try:
        yield
    finally:
        for registry, config, _ in pairs:
            registry.unregister(config.model_fields["kind"].default)


@pytest.fixture(autouse=True)
def _registered() -> Iterator[None]:
    with registered():
        yield


def _refusal(tree: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(tree)
    return str(caught.value)


def _unnamed(settings: Any, own: str, builtin: str) -> Any:
    """``settings`` with the registered kind's name put back to the built-in's, so the two compare."""
    return json.loads(json.dumps(settings).replace(own, builtin))


def test_a_registered_central_kind_plans_summarises_and_trains_as_the_builtin(tmp_path: Path) -> None:
    ran: dict[str, dict[str, Any]] = {}
    weights: dict[str, Tensor] = {}
    for kind in ("central", "own_central"):
        cfg = parse_config(tiny_config(rounds=2, privacy={"kind": kind, **CENTRAL}))
        assert cfg.privacy.central and not cfg.privacy.local
        engine = Engine(cfg, tmp_path / kind, tmp_path / kind / "runs.db")
        engine.run()
        ran[kind] = json.loads((tmp_path / kind / "summary.json").read_text())
        ran[kind]["plan"] = [stage.as_dict() for stage in round_plan(cfg)]
        weights[kind] = engine.global_state
    own, builtin = ran["own_central"], ran["central"]
    assert "dp_release" in [s["stage"] for s in own["plan"]]
    assert _unnamed(own["plan"], "own_central", "central") == builtin["plan"]
    assert _unnamed(own["stages"], "own_central", "central") == builtin["stages"]
    for field in ("epsilon", "noise_multiplier", "neighbours", "sensitivity", "mechanism"):
        assert own["privacy"][field] == builtin["privacy"][field], field
    assert torch.equal(weights["own_central"], weights["central"])  # the same noise on the same sums


def test_fedsim_run_plan_prints_dp_release_for_a_registered_central_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    printed = {}
    for kind in ("central", "own_central"):
        out, db = tmp_path / kind, tmp_path / f"{kind}.db"
        sets = [f"privacy.kind={kind}", "privacy.clip=1", "privacy.noise_multiplier=1", "rounds=2"]
        argv = ["run", str(QUICKSTART), *(a for s in sets for a in ("--set", s)), "--plan", "--out", str(out)]
        assert main([*argv, "--db", str(db)]) == 0
        lines = capsys.readouterr().out.splitlines()
        printed[kind] = [line for line in lines if re.match(r"\s*\d+\. \[", line)]
    assert any("] dp_release: own_central (" in line for line in printed["own_central"])
    assert [line.replace("own_central", "central") for line in printed["own_central"]] == printed["central"]


# each case: the overrides of a run the built-in kind is refused in, with the privacy section's kind left open
REFUSED_BESIDE_PRIVACY: dict[str, tuple[str, dict[str, Any]]] = {
    "a stage before the rule": ("central", {"server_stages": [{"kind": "model_only_stage", "at": "before_rule"}]}),
    "an undeclared stage": ("central", {"server_stages": [{"kind": "undeclared_stage"}]}),
    "a selector by loss": ("central", {"selection": {"kind": "power_of_choice"}}),
    "an undeclared selector": ("central", {"selection": {"kind": "undeclared_selector"}}),
    "a rule": ("central", {"aggregator": {"kind": "median"}}),
    "an attack reading the honest": ("central", {"attack": {"kind": "alie", "fraction": 0.2}}),
    "adaptive clipping with local noise": ("local", {"privacy": {"adaptive": {}}}),
    "local noise with a compressor": ("local", {"uplink": {"kind": "topk", "ratio": 0.1}}),
}


@pytest.mark.parametrize("case", sorted(REFUSED_BESIDE_PRIVACY))
def test_a_registered_privacy_kind_gets_every_refusal_the_builtin_gets(case: str) -> None:
    builtin, overrides = REFUSED_BESIDE_PRIVACY[case]
    privacy = {**CENTRAL, **overrides.get("privacy", {})}
    rest = {k: v for k, v in overrides.items() if k != "privacy"}
    said = {
        kind: _refusal(tiny_config(privacy={"kind": kind, **privacy}, **rest)) for kind in (builtin, f"own_{builtin}")
    }
    assert "\n" not in said[builtin]
    assert said[f"own_{builtin}"].replace(f"own_{builtin}", builtin) == said[builtin]


def test_an_undeclared_selector_beside_central_dp_is_refused_in_one_line() -> None:
    said = _refusal(tiny_config(selection={"kind": "undeclared_selector"}, privacy={"kind": "central", **CENTRAL}))
    assert said == (
        "selection.kind=undeclared_selector is not a uniform sample of the clients (it does not declare"
        " samples_uniformly; it may read what the clients reported (it does not declare reads_clients = False)), and"
        " the privacy accountant amplifies by uniform sampling only; use selection.kind=uniform beside privacy, or"
        " declare samples_uniformly = True if its cohort is one"
    )


def test_a_selector_declared_uniform_runs_as_uniform_does(tmp_path: Path) -> None:
    summaries, weights = {}, {}
    for kind in ("uniform", "own_uniform"):
        cfg = parse_config(tiny_config(rounds=2, selection={"kind": kind}, privacy={"kind": "central", **CENTRAL}))
        engine = Engine(cfg, tmp_path / kind, tmp_path / kind / "runs.db")
        engine.run()
        summaries[kind] = json.loads((tmp_path / kind / "summary.json").read_text())
        weights[kind] = engine.global_state
    assert "select" not in [s["stage"] for s in summaries["own_uniform"]["stages"]]  # no choice: nothing to plan
    assert summaries["own_uniform"]["stages"] == summaries["uniform"]["stages"]
    assert summaries["own_uniform"]["privacy"]["epsilon"] == summaries["uniform"]["privacy"]["epsilon"]
    assert torch.equal(weights["own_uniform"], weights["uniform"])


def test_a_stage_sees_only_what_it_declares_it_reads(tmp_path: Path) -> None:
    SEEN.clear()
    stages = [{"kind": "undeclared_stage"}, {"kind": "model_only_stage"}]
    engine = Engine(parse_config(tiny_config(rounds=1, server_stages=stages)), tmp_path / "s", tmp_path / "s.db")
    engine.run()
    assert SEEN == {"undeclared_stage": (5, False), "model_only_stage": (0, False)}  # 5 clients trained
    central = {"kind": "central", **CENTRAL}
    parse_config(tiny_config(server_stages=[{"kind": "model_only_stage"}], privacy=central))  # post-processing


def test_a_registered_compressor_takes_the_knob_and_the_server_its_declarations_name() -> None:
    skewscout = {"kind": "skewscout", "knob": {"name": "topk"}}
    parse_config(tiny_config(uplink={"kind": "own_topk"}, control=skewscout))
    said = _refusal(tiny_config(uplink={"kind": "own_topk"}, control={**skewscout, "knob": {"name": "rank"}}))
    assert said == "control.knob.name=rank tunes uplink.kind=powersgd, but uplink.kind is own_topk"
    lamb = {"kind": "onebit_lamb", "warmup": 5, "beta1": 0.9}
    parse_config(tiny_config(uplink={"kind": "own_onebit", "warmup": 5, "beta": 0.9}, server_optimizer=lamb))
    said = _refusal(tiny_config(uplink={"kind": "own_topk"}, server_optimizer=lamb))
    assert "set uplink.kind=onebit or own_onebit, not own_topk" in said
