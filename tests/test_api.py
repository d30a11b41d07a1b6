"""The Python API: your own model and data, callbacks, and the same run as from YAML."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from fedsim import Simulation
from fedsim.cli import main
from fedsim.config import ConfigError, load_config
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config

ROOT = Path(__file__).resolve().parent.parent


def two_layer(input_shape: tuple[int, ...], num_classes: int, hidden: int = 16) -> nn.Module:
    """A model factory named by import path in YAML: ``tests.test_api:two_layer``."""
    features = int(torch.tensor(input_shape).prod())
    return nn.Sequential(nn.Flatten(), nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, num_classes))


def expects_five_features(input_shape: tuple[int, ...], num_classes: int, hidden: int = 0) -> nn.Module:
    return nn.Linear(5, num_classes)


def not_a_model(input_shape: tuple[int, ...], num_classes: int, hidden: int = 0) -> object:
    return "a string"


def _tree(**model: object) -> dict[str, object]:
    return tiny_config(
        model={"kind": "python", "factory": "tests.test_api:two_layer", "kwargs": {"hidden": 8}, **model}
    )


@pytest.mark.slow
def test_the_example_trains_a_model_defined_in_the_file(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "own_model.py")], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "out" / "own-model" / "summary.json").read_text())
    assert summary["final_accuracy"] >= 0.93  # the docs' figure (how-to/own-model-data.md)
    assert summary["rounds"] < 60  # the callback stopped it early
    assert f"final_accuracy={summary['final_accuracy']:.4f}" in done.stdout


def test_yaml_by_import_path_and_the_api_give_the_same_weights(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(_tree()))
    from_yaml = Engine(load_config(path), out_dir=tmp_path / "yaml", db_path=tmp_path / "runs.db")
    from_yaml.run()
    api_tree = tiny_config(model={"kind": "python", "factory": "x:unused", "kwargs": {"hidden": 8}})
    sim = Simulation(api_tree, model=two_layer, out=tmp_path / "api", db=tmp_path / "runs.db")
    sim.run()
    assert torch.equal(sim.engine.global_state, from_yaml.global_state)
    assert from_yaml.global_state.numel() == 64 * 8 + 8 + 8 * 10 + 10


def test_callbacks_change_a_setting_and_stop_the_run(tmp_path: Path) -> None:
    seen: list[tuple[int, float]] = []

    def halve_then_stop(sim: Simulation, row: object) -> bool:
        seen.append((sim.round, sim.get("lr")))
        sim.set("lr", sim.get("lr") / 2)
        return sim.round == 2

    sim = Simulation(tiny_config(rounds=5), callbacks=[halve_then_stop], out=tmp_path / "o", db=tmp_path / "r.db")
    summary = sim.run()
    assert seen == [(1, 0.1), (2, 0.05)]
    assert summary.rounds == 2 and summary.final_accuracy == summary.final_accuracy  # evaluated, not NaN
    with pytest.raises(ConfigError, match=r"^algorithm\.lr: Input should be greater than 0"):
        sim.set("lr", -1.0)
    with pytest.raises(ConfigError, match=r"^algorithm\.momentum: no such setting of algorithm 'fedavg'"):
        sim.set("momentum", 0.9)


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ({"factory": "no_such_package.models:net"}, "model.factory: cannot import 'no_such_package.models'"),
        ({"factory": "tests.test_api:missing"}, "model.factory: 'tests.test_api' has no attribute 'missing'"),
        ({"factory": "tests.test_api:not_a_model"}, "model.factory returned a str, not a torch.nn.Module"),
        ({"factory": "not an import path"}, "model.factory: expected package.module:function (the module, a colon"),
        ({"kwargs": {"depth": 3}}, "model.factory: TypeError: two_layer() got an unexpected keyword argument 'depth'"),
        ({"factory": "tests.test_api:expects_five_features"}, "model: fails on inputs of shape [2, 1, 8, 8]"),
    ],
)
def test_a_bad_model_is_one_line_and_exit_2(
    model: dict[str, object], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_tree(**model)))
    with pytest.raises(SystemExit) as exited:
        main(["run", str(path), "--out", str(tmp_path / "o"), "--db", str(tmp_path / "r.db")])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedsim: error: ") and message in err and "\n" not in err


def test_a_model_whose_output_does_not_fit_the_task_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"model: output \[2, 3\] for 2 inputs does not fit classification with 10"):
        Simulation(
            tiny_config(),
            model=lambda shape, classes: nn.Sequential(nn.Flatten(), nn.Linear(64, 3)),
            out=tmp_path,
            db=tmp_path / "r.db",
        )


def random_clients(clients: int, seed: int, per_client: int = 8) -> object:
    """A data factory named by import path in YAML: ``tests.test_api:random_clients``."""
    from fedsim.data.base import ArrayDataset, ClientData

    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(clients * per_client, 64, generator=gen, device="cpu")
    y = torch.randint(0, 10, (clients * per_client,), generator=gen, device="cpu")
    parts = [torch.arange(c * per_client, (c + 1) * per_client, device="cpu").numpy() for c in range(clients)]
    return ArrayDataset(x, y, parts, ClientData(x[:40], y[:40]), num_classes=10)


def ten_clients(clients: int, seed: int) -> object:
    return random_clients(10, seed)


def test_a_dataset_by_import_path_trains_and_a_wrong_one_is_refused(tmp_path: Path) -> None:
    tree = tiny_config(data={"dataset": "python", "factory": "tests.test_api:random_clients", "clients": 10})
    engine = Engine(load_config(_write(tmp_path, tree)), out_dir=tmp_path / "o", db_path=tmp_path / "r.db")
    engine.run()
    assert engine.dataset.num_clients == 10 and engine.dataset.n_samples(3) == 8
    tree["data"]["kwargs"] = {"per_client": 0, "colour": "red"}
    with pytest.raises(ConfigError, match=r"^data\.factory: TypeError: random_clients\(\) got an unexpected keyword"):
        Engine(load_config(_write(tmp_path, tree)), out_dir=tmp_path / "p", db_path=tmp_path / "r.db")
    not_data = tiny_config(data={"dataset": "python", "factory": "tests.test_api:not_a_model", "clients": 10})
    with pytest.raises(ConfigError, match=r"^data\.factory: TypeError: not_a_model\(\) got an unexpected keyword"):
        Engine(load_config(_write(tmp_path, not_data)), out_dir=tmp_path / "q", db_path=tmp_path / "r.db")
    wrong_count = tiny_config(data={"dataset": "python", "factory": "tests.test_api:ten_clients", "clients": 12})
    with pytest.raises(ConfigError, match=r"^data\.factory made 10 clients; data\.clients is 12"):
        Engine(load_config(_write(tmp_path, wrong_count)), out_dir=tmp_path / "r", db_path=tmp_path / "r.db")


def _write(tmp_path: Path, tree: dict[str, object]) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def test_a_decentralised_run_goes_through_the_api_with_your_model_and_callbacks(tmp_path: Path) -> None:
    """A topology picks the decentralised round loop; callbacks record metrics, the model is the nodes' average,
    and settings cannot change mid-run."""
    tree = tiny_config(rounds=4, clients_per_round=None, data__clients=6, eval_every=2)
    tree.pop("clients_per_round")
    tree["algorithm"] = {"kind": "dmsgd", "lr": 0.05, "batch_size": 8, "momentum": 0.9}
    tree["topology"] = {"kind": "ring"}
    seen: list[int] = []

    def watch(sim: Simulation, result: object) -> dict[str, float]:
        seen.append(sim.round)
        return {"my_score": float(sim.round)}

    sim = Simulation(tree, model=two_layer, callbacks=[watch], out=tmp_path / "out", db=tmp_path / "runs.db")
    summary = sim.run()
    assert seen == [1, 2, 3, 4] and summary.executor == "gossip"
    fields = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert fields["callback_metrics"] == {"my_score": 4.0} and fields["topology"] == "ring"
    model = sim.model()
    assert isinstance(model[1], nn.Linear) and model[1].out_features == 16  # your module, the average's weights
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    torch.testing.assert_close(flat, sim.engine.average, rtol=0, atol=0)
    assert sim.get("momentum") == 0.9
    with pytest.raises(ConfigError, match=r"algorithm\.lr: a decentralised run .* keeps its settings"):
        sim.set("lr", 0.1)
