"""fedsim's client code under Flower's own Simulation Runtime lands on fedsim's weights."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim.api.launch import final_weights
from fedsim.config import ConfigError, parse_config
from tests.conftest import RunFactory, tiny_config

pytest.importorskip("ray", reason="Flower's Simulation Runtime needs flwr[simulation]")
flower_app = pytest.importorskip("fedsim.flower")

# Flower averages local models (sum of w_i / W * local_i, in numpy), fedsim adds the mean weighted delta to the
# global model: the same number in exact arithmetic, a few float32 ulps apart in practice.
ATOL = 1e-6


def parity_tree(algorithm: str) -> dict[str, object]:
    return tiny_config(
        rounds=1,
        clients_per_round=None,
        eval_every=0,
        threads=1,
        data__clients=6,
        model={"kind": "mlp", "hidden": [16]},
        algorithm={"kind": algorithm, "lr": 0.1, "batch_size": 16, "local_epochs": 2},
    )


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["fedavg", "fedprox"])
def test_one_flower_round_equals_one_fedsim_round(algorithm: str, run_engine: RunFactory, tmp_path: Path) -> None:
    tree = parity_tree(algorithm)
    engine = run_engine(tree)
    fedsim_weights = final_weights(engine.out_dir)

    path = flower_app.run_flower_simulation(parse_config(tree), tmp_path / "flower")
    flower_weights = final_weights(path.parent)

    initial = flower_app.FlowerWorker.build(parse_config(tree)).replica.flat
    assert flower_weights.shape == fedsim_weights.shape == initial.shape
    assert (flower_weights - initial).abs().max() > 1e-3  # the round trained: the test can fail
    torch.testing.assert_close(flower_weights, fedsim_weights, rtol=0, atol=ATOL)


@pytest.mark.slow
def test_partial_cohorts_under_flower_train_fedsims_cohort_and_land_in_the_run_store(
    run_engine: RunFactory, tmp_path: Path
) -> None:
    import json

    from fedsim.runstore import RunStore

    tree = {**parity_tree("fedavg"), "rounds": 3, "clients_per_round": 2}  # 2 of 6: Flower would pick its own
    engine = run_engine(tree)
    path = flower_app.run_flower_simulation(tree, tmp_path / "flower", db=tmp_path / "runs.db")  # a plain dict
    torch.testing.assert_close(final_weights(path.parent), final_weights(engine.out_dir), rtol=0, atol=ATOL)
    summary = json.loads((tmp_path / "flower" / "summary.json").read_text())
    fedsim_summary = json.loads((engine.out_dir / "summary.json").read_text())
    assert summary["executor"] == "flower" and summary["rounds"] == 3
    assert summary["final_accuracy"] == pytest.approx(fedsim_summary["final_accuracy"], abs=1e-6)
    with RunStore.open_readonly(tmp_path / "runs.db") as store:
        run = store.get_run(summary["run_id"])
        rounds = store.rounds(summary["run_id"])
    assert run is not None and run.status == "finished" and run.summary is not None
    assert [r.clients for r in rounds] == [2, 2, 2] and rounds[-1].test_accuracy == summary["final_accuracy"]


def test_algorithms_without_a_flower_equivalent_are_refused() -> None:
    cfg = parse_config(parity_tree("scaffold"))
    with pytest.raises(ConfigError, match=r"algorithm\.kind='scaffold' has no Flower FedAvg equivalent"):
        flower_app.client_app(cfg)


@pytest.mark.parametrize(
    ("section", "value", "name"),
    [
        ("uplink", {"kind": "ef_sign"}, "uplink.kind=ef_sign"),
        ("downlink", {"kind": "qsgd"}, "downlink.kind=qsgd"),
        ("coreset", {"kind": "craig"}, "coreset.kind=craig"),
        ("attack", {"kind": "sign_flip", "fraction": 0.2}, "attack.kind=sign_flip"),
        ("aggregator", {"kind": "median"}, "aggregator.kind=median"),
        ("selection", {"kind": "power_of_choice"}, "selection.kind=power_of_choice"),
        ("control", {"kind": "skewscout"}, "control.kind=skewscout"),
    ],
)
def test_what_only_the_simulation_runs_is_refused_by_the_flower_apps(section: str, value: Any, name: str) -> None:
    cfg = parse_config({**parity_tree("fedavg"), section: value})
    with pytest.raises(ConfigError, match=rf"{re.escape(name)} runs in fedsim's simulation only"):
        flower_app.client_app(cfg)


def test_an_adapter_is_refused_by_the_flower_apps_which_would_send_the_frozen_base(tmp_path: Path) -> None:
    tree = parity_tree("fedavg")
    tree["model"] = {"kind": "mlp", "hidden": [16], "adapter": {"factory": "tests.adapters.bitfit:bitfit"}}
    refusal = r"^model\.adapter\.kind=test_bitfit: the Flower apps send the model's whole state"
    with pytest.raises(ConfigError, match=refusal):
        flower_app.client_app(parse_config(tree))
    with pytest.raises(ConfigError, match=refusal):
        flower_app.server_app(parse_config(tree), tmp_path / "out")
    assert not (tmp_path / "out").exists()


PRIVATE = {"kind": "central", "clip": 0.001, "noise_multiplier": 50.0}


def test_a_private_config_is_refused_by_every_flower_app_before_anything_is_written(tmp_path: Path) -> None:
    """The apps train plain FedAvg (no clip, noise or accounting): a DP config there would report a public
    model as private, so it is one line, and no run starts (the run store and the output folder stay absent)."""
    from fedsim.flower import secagg as secure

    cfg = parse_config({**parity_tree("fedavg"), "privacy": PRIVATE})
    refusal = r"^privacy\.kind=central: the Flower apps do not clip, noise or account; run privacy\.\* in fedsim"
    for app in (flower_app.client_app, secure.secure_client_app):
        with pytest.raises(ConfigError, match=refusal):
            app(cfg)
    with pytest.raises(ConfigError, match=refusal):
        flower_app.server_app(cfg, tmp_path / "out")
    db = tmp_path / "runs.db"
    with pytest.raises(ConfigError, match=refusal):
        flower_app.run_flower_simulation(cfg, tmp_path / "out", db=db)
    assert not db.exists() and not (tmp_path / "out").exists()


def test_the_plain_apps_refuse_secagg_and_point_to_the_secure_ones() -> None:
    secagg = {"kind": "secagg_plus", "num_shares": 3, "reconstruction_threshold": 2}
    cfg = parse_config({**parity_tree("fedavg"), "secagg": secagg})
    with pytest.raises(ConfigError, match=r"the plain Flower apps sum in the clear; use fedsim\.flower\.secagg"):
        flower_app.client_app(cfg)


def test_your_own_server_stage_is_refused_by_the_flower_apps() -> None:
    stage = {"factory": f"{Path(__file__).resolve().parents[2] / 'examples' / 'own_server_stage.py'}:Reputation"}
    cfg = parse_config({**parity_tree("fedavg"), "server_stages": [stage]})
    with pytest.raises(ConfigError, match="server_stages run in fedsim's simulation only"):
        flower_app.client_app(cfg)
