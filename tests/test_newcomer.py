"""What a new user bringing their own work tripped over (issue 25's newcomer points), each as they met it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from fedsim import RoundResult, Simulation, load_model
from fedsim.cli import main
from fedsim.config import ConfigError
from tests.conftest import tiny_config


def test_a_second_simulation_of_the_same_name_gets_its_own_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first = Simulation({**tiny_config(rounds=1), "name": "mine"}, db="runs.db").run()
    second = Simulation({**tiny_config(rounds=1), "name": "mine"}, db="runs.db").run()
    assert json.loads(Path("out/mine/summary.json").read_text())["run_id"] == first.run_id
    assert json.loads(Path("out/mine-2/summary.json").read_text())["run_id"] == second.run_id


def test_the_scheduled_learning_rate_is_in_the_round_metrics_the_log_and_sim_lr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = tiny_config(rounds=4, progress=True)
    tree["algorithm"] = {"kind": "fedavg", "lr": 0.1, "lr_schedule": {"kind": "cosine", "rounds": 4}}
    seen: list[tuple[float, float]] = []

    def record(sim: Simulation, result: RoundResult) -> None:
        seen.append((result.metrics["lr"], sim.lr))

    sim = Simulation(tree, out=tmp_path / "out", db=tmp_path / "runs.db", callbacks=[record])
    assert sim.lr == pytest.approx(0.1) and sim.get("lr") == 0.1  # the base rate stays what was configured
    sim.run()
    rates = [sim.cfg.algorithm.client_lr(r) for r in range(4)]
    assert [lr for lr, _ in seen] == pytest.approx(rates) and rates[0] > rates[1] > rates[2] > rates[3]
    assert [nxt for _, nxt in seen][:3] == pytest.approx(rates[1:])  # sim.lr: the next round's
    log = capsys.readouterr().out
    assert "round 4/4: accuracy" in log and f"lr {rates[3]:.4g}," in log


class Tiny(nn.Module):
    def __init__(self, input_shape: tuple[int, ...] = (8, 8), num_classes: int = 10) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.net(x)
        return out


def test_a_saved_model_loads_back_into_your_module_and_sim_model_is_the_same(tmp_path: Path) -> None:
    torch.manual_seed(0)
    sim = Simulation(tiny_config(rounds=2), model=Tiny, out=tmp_path / "out", db=tmp_path / "runs.db")
    sim.run()
    trained = sim.model()
    loaded = load_model(Tiny(), tmp_path / "out")
    x = torch.randn(5, 8, 8)
    assert torch.equal(loaded(x), trained(x))
    with pytest.raises(ConfigError, match=r"holds 1210 values; this module's parameters and float buffers 650"):
        load_model(nn.Sequential(nn.Flatten(), nn.Linear(64, 10)), tmp_path / "out" / "model.safetensors")


def test_resume_of_a_finished_run_says_so_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = tiny_config(rounds=3)
    tree["checkpoint"] = {"every": 1}
    (tmp_path / "run.yaml").write_text(json.dumps(tree))
    out, db = tmp_path / "out", str(tmp_path / "runs.db")
    assert main(["run", str(tmp_path / "run.yaml"), "--out", str(out), "--db", db]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main(["resume", str(out), "--db", db]) == 0
    said = capsys.readouterr()
    assert said.out.count("\n") == 1 and "the run finished" in said.out and "nothing to resume" in said.out
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before


def test_a_resumed_run_counts_its_wall_time_from_the_start_and_repeats_no_old_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedsim.sim.persist.interrupted import RunInterrupted

    tree = tiny_config(rounds=6, eval_every=4, progress=True)
    tree["checkpoint"] = {"every": 1}
    out, db = tmp_path / "out", tmp_path / "runs.db"

    def stop_after_five(sim: Simulation, result: RoundResult) -> None:
        if result.round == 5:
            sim.engine.writer.wait()
            raise KeyboardInterrupt  # as SIGTERM at the next stop point

    before = Simulation(tree, out=out, db=db, callbacks=[stop_after_five])
    with pytest.raises(RunInterrupted):
        before.run()
    capsys.readouterr()
    assert main(["resume", str(out), "--db", str(db)]) == 0
    log = capsys.readouterr().out
    assert "round 4/6" not in log  # round 4's accuracy was shown before the stop
    assert "round 6/6: accuracy" in log
    meta = json.loads((sorted((out / "checkpoints").glob("ckpt-*"))[-2] / "meta.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["wall_s"] > meta["wall_s"] > 0


def test_your_own_data_needs_no_data_section_and_the_summary_says_provided(tmp_path: Path) -> None:
    from fedsim.config.data import DigitsData
    from fedsim.data.digits import digits

    data = digits(DigitsData(dataset="digits", clients=6), seed=0)
    tree = {"name": "own", "rounds": 1, "progress": False, "model": {"kind": "logistic"}}
    Simulation(tree, data=data, out=tmp_path / "out", db=tmp_path / "runs.db").run()
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["dataset"] == "provided" and summary["clients"] == 6
    assert json.loads((tmp_path / "out" / "config.json").read_text())["data"] == {
        "clients": 6,
        "test_fraction": 0.2,
        "dataset": "provided",
    }


def test_a_yaml_factory_imports_from_the_directory_fedsim_runs_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    (tmp_path / "my_pkg").mkdir()
    (tmp_path / "my_pkg" / "__init__.py").write_text("")
    (tmp_path / "my_pkg" / "own_data.py").write_text(
        "from fedsim.config.data import DigitsData\n"
        "from fedsim.data.digits import digits\n\n\n"
        "def make(clients, seed):\n"
        "    return digits(DigitsData(dataset='digits', clients=clients), seed)\n"
    )
    Path("run.yaml").write_text(
        "name: own\nrounds: 1\nprogress: false\n"
        "data: {dataset: python, factory: 'my_pkg.own_data:make', clients: 5}\nmodel: {kind: logistic}\n"
    )
    assert main(["run", "run.yaml", "--db", "runs.db"]) == 0, capsys.readouterr().err
    assert Path("out/own/summary.json").is_file()


def test_the_logs_samples_per_second_is_summary_jsons(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = tiny_config(rounds=4, eval_every=2, progress=True)
    (tmp_path / "run.yaml").write_text(json.dumps(tree))
    assert main(["run", str(tmp_path / "run.yaml"), "--out", str(tmp_path / "out"), "--db", str(tmp_path / "db")]) == 0
    last = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("round 4/4"))
    logged = last.split(", ")[1]  # "round 4/4: accuracy 0.9, 12,345 samples/s, lr 0.1, 0.3 s"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert logged == f"{summary['samples_per_s']:,.0f} samples/s"


def test_checkpoint_settings_do_not_name_a_run() -> None:
    from fedsim.config import named_by_overrides

    assert named_by_overrides("q", ["checkpoint.every=5", "checkpoint.keep=2", "rounds=3"]) == "q-rounds3"
