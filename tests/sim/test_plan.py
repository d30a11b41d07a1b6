"""The round's plan (fedsim.sim.rounds.plan) is the order a run calls its stages in, summary.json records it, and
``fedsim run CONFIG --plan`` prints it without training or writing anything."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import pytest

from fedsim.algorithms.server import ServerStep
from fedsim.comm.downlink import Downlink
from fedsim.comm.uplink.stage import Uplink
from fedsim.config import parse_config
from fedsim.privacy.dp import DifferentialPrivacy
from fedsim.privacy.secagg import SecAggPlus
from fedsim.robust.aggregation import RobustAggregation
from fedsim.robust.attack import Attack
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.plan import round_plan
from fedsim.sim.rounds.upload import SumBuffer, client_pipeline
from tests.conftest import QUICKSTART, tiny_config

CALLS = {  # each stage of the plan, by the method a run calls it through
    "attack": (Attack, "apply_"),
    "dp_clip": (DifferentialPrivacy, "clip_"),
    "uplink": (Uplink, "__call__"),
    "dp_decoded_clip": (DifferentialPrivacy, "clip_decoded_"),
    "dp_local_noise": (DifferentialPrivacy, "local_noise_"),
    "aggregator_transform": (RobustAggregation, "transform_"),
    "secagg_mask": (SecAggPlus, "add_"),
    "sum": (SumBuffer, "add_rows_"),
    "attack_finish": (Attack, "finish_"),
    "report_loss": (Attack, "reported"),
    "secagg_unmask": (SecAggPlus, "aggregate_"),
    "aggregator": (RobustAggregation, "aggregate_"),
    "dp_release": (DifferentialPrivacy, "release_"),
    "server_optimizer": (ServerStep, "apply_"),
    "downlink": (Downlink, "broadcast_"),
}
DP = {"kind": "central", "clip": 0.5, "noise_multiplier": 0.8}
SECAGG = {"kind": "secagg_plus", "num_shares": 3, "reconstruction_threshold": 2}
CONFIGS: dict[str, dict[str, Any]] = {
    "dp-compressed-bounded": {
        "attack": {"kind": "sign_flip", "fraction": 0.3},
        "privacy": DP,
        "uplink": {"kind": "ef_sign"},
        "aggregator": {"kind": "norm_bound", "bound": 0.3},
        "downlink": {"kind": "qsgd"},
    },
    "omniscient-gathered": {"attack": {"kind": "alie", "fraction": 0.3}, "aggregator": {"kind": "median"}},
    "local-dp-secagg": {
        "attack": {"kind": "scale", "fraction": 0.3, "scale": 3.0},
        "privacy": DP | {"kind": "local"},
        "secagg": SECAGG,
    },
    "dp-onebit-lamb": {
        "privacy": DP,
        "uplink": {"kind": "onebit", "warmup": 1},
        "server_optimizer": {"kind": "onebit_lamb", "warmup": 1},
    },
    "omniscient-clipped-topk": {
        "attack": {"kind": "ipm", "fraction": 0.3, "reported_loss": "low"},
        "aggregator": {"kind": "centered_clip"},
        "uplink": {"kind": "topk", "fraction": 0.2},
    },
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_a_round_calls_its_stages_in_the_plans_order(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[str] = []
    for stage, (cls, method) in CALLS.items():
        original = getattr(cls, method)

        def recorded(self: Any, *args: Any, __stage: str = stage, __original: Any = original, **kwargs: Any) -> Any:
            if __stage not in order:
                order.append(__stage)
            return __original(self, *args, **kwargs)

        monkeypatch.setattr(cls, method, functools.wraps(original)(recorded))
    cfg = parse_config(tiny_config(rounds=1, clients_per_round=10, **CONFIGS[name]))
    engine = Engine(cfg, out_dir=tmp_path / "out", db_path=tmp_path / "runs.db")
    train = engine.executor.train

    def training(*args: Any, **kwargs: Any) -> Any:
        order.append("train")
        return train(*args, **kwargs)

    monkeypatch.setattr(engine.executor, "train", training)
    engine.run()
    plan = round_plan(cfg)
    planned = [stage.stage for stage in plan]
    pipeline = client_pipeline(engine.executor.stages, engine.uplink)  # type: ignore[attr-defined]
    client = [s.stage for s in plan if s.side == "client" and s.stage not in ("coreset", "train")]
    assert [stage.stage for stage in pipeline] == client  # the client side runs as one list, the plan's
    assert order == [
        s for s in planned if s in CALLS or s == "train"
    ]  # every stage the plan names with a call, in its order
    assert set(planned) >= set(order)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert [s["stage"] for s in summary["stages"]] == planned
    assert summary["stages"][-1]["side"] == "server" and summary["stages"][0]["stage"] == "train"


def test_the_plan_names_your_own_stages_and_their_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    cfg = parse_config(
        tiny_config(
            attack={"factory": "examples/own_attack.py:Mimic", "fraction": 0.2},
            aggregator={"factory": "examples/own_rule.py:MeaMed", "byzantine": 1},
        )
    )
    stages = {s.stage: s.as_dict() for s in round_plan(cfg)}
    assert stages["attack"]["kind"] == "mimic" and stages["attack"]["factory"] == "examples/own_attack.py:Mimic"
    assert stages["attack_finish"]["kind"] == "mimic"  # it reads the honest updates
    assert stages["aggregator"] == {
        "stage": "aggregator",
        "side": "server",
        "factory": "examples/own_rule.py:MeaMed",
        "memory_mb": 512.0,
        "byzantine": 1,
        "kind": "meamed",
    }
    assert stages["sum"]["kind"] == "gather"


def test_fedsim_run_plan_prints_the_stages_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedsim.cli import main

    out, db = tmp_path / "o", tmp_path / "runs.db"
    sets = ["--set", "privacy.kind=central", "--set", "privacy.clip=1", "--set", "privacy.noise_multiplier=1"]
    code = main(
        ["run", str(QUICKSTART), *sets, "--set", "uplink.kind=qsgd", "--plan", "--out", str(out), "--db", str(db)]
    )
    printed = capsys.readouterr().out.splitlines()
    assert code == 0 and not out.exists() and not db.exists()
    assert printed[0].startswith("run quickstart") and "40 rounds" in printed[0]
    assert "cohort: 50 clients a round (fixed sampling)" in printed
    stages = [line for line in printed if re.match(r"\s*\d+\. \[", line)]
    names = [line.split("] ")[1].split(":")[0] for line in stages]
    assert names == [
        "train",
        "dp_clip",
        "uplink",
        "dp_decoded_clip",
        "sum",
        "all_reduce",
        "dp_release",
        "server_update",
        "server_optimizer",
    ]
    assert "uplink: qsgd (levels=16, bucket=512, elias=False)" in stages[2]
    assert stages[-1].endswith("server_optimizer: sgd (lr=1.0, momentum=0.0, nesterov=False)")
