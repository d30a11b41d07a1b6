"""The engines read the config through protocols of the sections they use (fedsim.sim.run.settings), and those
protocols are complete: an engine built from an object that has only the protocol's members, taken from a parsed
RunConfig, runs to the same weights as one built from the RunConfig itself; so do the launcher the command line and
a sweep hand their config to, and the Flower apps' worker. An engine reaching for a section its
protocol does not name (by ``getattr`` or a path mypy does not follow) fails here with an AttributeError."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from fedsim.api.launch import execute, final_weights
from fedsim.asynchronous.engine import AsyncEngine
from fedsim.config import RunConfig, parse_config
from fedsim.decentralised.gossip import GossipEngine
from fedsim.flower.app import FlowerSettings, FlowerWorker, check_supported
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.run.settings import EngineSettings, RunSettings
from tests.asynchronous.test_async_runs import _tree as clock_tree
from tests.conftest import tiny_config
from tests.gossip.test_gossip_runs import gossip_config
from tests.traces.test_traces import five


def _members(protocol: type) -> list[str]:
    return sorted(name for name in dir(protocol) if not name.startswith("_"))


def _only(cfg: RunConfig, protocol: type) -> SimpleNamespace:
    """An object with the protocol's members and nothing else, each the RunConfig's."""
    members = {name: getattr(cfg, name) for name in _members(protocol)}
    if "model_copy" in members:
        members["model_copy"] = lambda **kw: _only(cfg.model_copy(**kw), protocol)
    return SimpleNamespace(**members)


def _final(kind: type, cfg: Any, out: Path) -> torch.Tensor:
    engine = kind(cfg, out_dir=out, db_path=out.parent / f"{out.name}.db")
    engine.run()
    return engine.final_model()


def test_the_protocols_name_sections_of_the_run_config() -> None:
    fields = set(RunConfig.model_fields) | {"cohort_size", "decentralised", "attackers_warning"}
    fields |= {"model_dump", "model_copy"}
    assert set(_members(EngineSettings)) <= fields
    assert set(_members(RunSettings)) < set(_members(EngineSettings))
    assert "asynchronous" in _members(EngineSettings) and "asynchronous" not in _members(RunSettings)


@pytest.mark.parametrize(
    "stages",
    [{}, {"privacy": {"kind": "central", "clip": 1.0, "noise_multiplier": 0.5}, "uplink": {"kind": "qsgd"}}],
    ids=["plain", "dp-qsgd"],
)
def test_a_synchronous_engine_runs_on_its_protocols_members_alone(tmp_path: Path, stages: dict[str, Any]) -> None:
    cfg = parse_config(tiny_config(rounds=2, **stages))
    whole = _final(Engine, cfg, tmp_path / "whole")
    narrow = _final(Engine, _only(cfg, EngineSettings), tmp_path / "narrow")
    assert torch.equal(whole, narrow)


def test_an_asynchronous_engine_runs_on_its_protocols_members_alone(tmp_path: Path) -> None:
    trace = tmp_path / "five.npz"
    five().save(trace)
    cfg = parse_config(clock_tree(trace, "fedbuff", rounds=3))
    whole = _final(AsyncEngine, cfg, tmp_path / "whole")
    narrow = _final(AsyncEngine, _only(cfg, EngineSettings), tmp_path / "narrow")
    assert torch.equal(whole, narrow)


def test_a_gossip_engine_runs_on_every_runs_sections_alone(tmp_path: Path) -> None:
    cfg = parse_config(gossip_config("decentlam", "exponential"))
    whole = _final(GossipEngine, cfg, tmp_path / "whole")
    narrow = _final(GossipEngine, _only(cfg, RunSettings), tmp_path / "narrow")
    assert torch.equal(whole, narrow)


def test_an_engine_missing_a_section_of_its_protocol_fails_naming_it(tmp_path: Path) -> None:
    narrow = _only(parse_config(tiny_config()), EngineSettings)
    del narrow.selection
    with pytest.raises(AttributeError, match="selection"):
        Engine(narrow, out_dir=tmp_path / "out", db_path=tmp_path / "runs.db")


def test_the_launcher_runs_a_config_on_its_engines_members_alone(tmp_path: Path) -> None:
    """``fedsim run`` and a sweep hand the loaded config to the launcher, which reads EngineSettings only."""
    cfg = parse_config(tiny_config(rounds=2))
    execute(cfg, tmp_path / "whole", tmp_path / "runs.db")
    execute(_only(cfg, EngineSettings), tmp_path / "narrow", tmp_path / "runs.db")
    assert torch.equal(final_weights(tmp_path / "whole"), final_weights(tmp_path / "narrow"))


def test_the_flower_worker_trains_a_client_on_its_settings_members_alone() -> None:
    cfg = parse_config(tiny_config())
    narrow = _only(cfg, FlowerSettings)
    assert narrow.model_dump_json() == cfg.model_dump_json()  # what each Flower worker process is sent
    check_supported(narrow)
    whole_worker, narrow_worker = FlowerWorker.build(cfg), FlowerWorker.build(narrow)
    state = {k: v.clone() for k, v in whole_worker.replica.module.state_dict().items()}  # training moves the replica
    _, whole = whole_worker.update(3, 1, state)
    _, alone = narrow_worker.update(3, 1, state)
    assert torch.equal(whole.sums["delta"], alone.sums["delta"]) and whole.samples == alone.samples > 0
