"""The Python API as safe as the command line: overrides honoured, a run's directory never silently replaced,
Ctrl-C caught as a KeyboardInterrupt, an interrupted run resumable (its Python objects given again), and a
dataset that does not follow the protocol, or whose labels pass num_classes, refused in one line."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from fedsim import RoundResult, Simulation
from fedsim.api.launch import final_weights
from fedsim.cli import main
from fedsim.config import ConfigError, RunConfig, load_config, parse_config
from fedsim.data.base import ClientData
from fedsim.data.build import build_dataset
from fedsim.sim.persist.checkpoint import complete
from tests.conftest import refused, tiny_config

ROOT = Path(__file__).resolve().parent.parent


def _tree(**extra: Any) -> dict[str, Any]:
    return tiny_config(**{"rounds": 6, "eval_every": 3, "format": 2, **extra})


def _sigint_after(round_done: int) -> Any:
    """A callback that sends this process SIGINT after round ``round_done``, as Ctrl-C would."""

    def callback(sim: Simulation, result: RoundResult) -> None:
        if result.round == round_done:
            os.kill(os.getpid(), signal.SIGINT)

    return callback


def test_overrides_apply_to_a_mapping_as_to_a_file_and_a_run_config_refuses_them(tmp_path: Path) -> None:
    tree = _tree()
    sim = Simulation(tree, overrides=["rounds=2", "algorithm.lr=0.05"], out=tmp_path / "a", db=tmp_path / "r.db")
    assert (sim.cfg.rounds, sim.cfg.algorithm.lr) == (2, 0.05)
    assert sim.cfg.name != "test" and "rounds2" in sim.cfg.name  # named by what changed, as on the command line
    assert tree["rounds"] == 6  # the caller's mapping is left as it was
    with pytest.raises(ConfigError, match=r"^overrides= apply to a YAML path or a mapping"):
        Simulation(parse_config(tree), overrides=["rounds=2"], out=tmp_path / "b", db=tmp_path / "r.db")


def test_an_out_holding_a_run_is_refused_unless_overwrite_which_clears_the_old_runs_files(tmp_path: Path) -> None:
    out, db = tmp_path / "out", tmp_path / "runs.db"
    Simulation(_tree(rounds=4, checkpoint={"every": 1}), out=out, db=db).run()
    assert complete(out / "checkpoints")  # the first run's
    with pytest.raises(ConfigError, match=r"holds a finished run \(summary\.json\); pass overwrite=True") as refused:
        Simulation(_tree(), out=out, db=db)
    assert "\n" not in str(refused.value) and "resume" not in str(refused.value)  # nothing to go on with
    assert (out / "summary.json").is_file()  # nothing of the first run touched
    Simulation(_tree(rounds=2), out=out, db=db, overwrite=True).run()
    assert not complete(out / "checkpoints")  # none of the first run's left to be mistaken for this one's


def test_ctrl_c_is_caught_by_except_keyboard_interrupt_and_the_run_is_resumable_by_default(tmp_path: Path) -> None:
    """A default run (no checkpoint section) stopped by SIGINT checkpoints the round it finished, and ``fedsim
    resume`` completes it to the weights of a run never stopped."""
    out, db = tmp_path / "stopped", tmp_path / "runs.db"
    caught = None
    try:
        Simulation(_tree(), out=out, db=db, callbacks=[_sigint_after(2)]).run()
    except KeyboardInterrupt as exc:
        caught = exc
    assert caught is not None and "interrupted after round" in str(caught)
    assert f"`fedsim resume {out}`" in str(caught) and "no checkpoint" not in str(caught)
    assert main(["resume", str(out), "--db", str(db)]) == 0
    Simulation(_tree(), out=tmp_path / "whole", db=db).run()
    assert torch.equal(final_weights(out), final_weights(tmp_path / "whole"))


def _objects(tree: dict[str, Any]) -> tuple[Any, Any]:
    cfg: RunConfig = parse_config(tree)

    def model(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(int(torch.tensor(input_shape).prod()), num_classes))

    return model, build_dataset(cfg.data, cfg.seed, False)


def test_a_run_of_python_objects_resumes_bit_identical_from_python_and_the_cli_names_the_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = _tree(algorithm={"kind": "fedavg", "lr": 0.1, "batch_size": 16, "client_optimizer": {"kind": "adam"}})
    out, db = tmp_path / "stopped", tmp_path / "runs.db"
    model, data = _objects(tree)
    with pytest.raises(
        KeyboardInterrupt, match=r"fedsim\.Simulation\.resume\('.*stopped', model=\.\.\., data=\.\.\.\)"
    ):
        Simulation(tree, model=model, data=data, out=out, db=db, callbacks=[_sigint_after(3)]).run()
    with pytest.raises(SystemExit, match="2"):
        main(["resume", str(out), "--db", str(db)])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "made with Python objects (model, data)" in err and "Simulation.resume" in err
    with pytest.raises(ConfigError, match=r"resume it with the same data= again"):
        Simulation.resume(out, model=model, db=db)
    resumed = Simulation.resume(out, model=model, data=data, db=db)
    assert resumed.round == 3
    resumed.run()
    model, data = _objects(tree)
    Simulation(tree, model=model, data=data, out=tmp_path / "whole", db=db).run()
    assert torch.equal(final_weights(out), final_weights(tmp_path / "whole"))


class _TupleData:
    """A dataset written as a newcomer might: splits as (x, y) tuples."""

    num_clients, num_classes, input_shape = 2, 2, (3,)
    test = (torch.zeros(4, 3), torch.zeros(4, dtype=torch.long))

    def client(self, cid: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.test

    def n_samples(self, cid: int) -> int:
        return 4


def test_a_dataset_off_the_protocol_is_one_line_naming_what_is_wrong(tmp_path: Path) -> None:
    tree = _tree(clients_per_round=2)
    with pytest.raises(ConfigError) as refused:
        Simulation({**tree, "data": {"dataset": "provided", "clients": 2}}, data=_TupleData(), out=tmp_path / "o")
    assert str(refused.value) == (
        "data= _TupleData.test is a tuple, not a fedsim.data.ClientData(x, y)"
        " (wrap it: ClientData(torch.as_tensor(x), torch.as_tensor(y)))"
    )

    class NoShape(_TupleData):
        input_shape = None  # type: ignore[assignment]
        test = ClientData(torch.zeros(4, 3), torch.zeros(4, dtype=torch.long))  # type: ignore[assignment]

    with pytest.raises(ConfigError, match=r"^data= NoShape\.input_shape is missing \(a FederatedDataset's"):
        Simulation({**tree, "data": {"dataset": "provided", "clients": 2}}, data=NoShape(), out=tmp_path / "o")


class _Labelled:
    """4 clients of 10 samples, 3 classes; ``bad`` puts one label out of range: (split, sample, label)."""

    num_clients, num_classes, input_shape = 4, 3, (5,)

    def __init__(self, bad: tuple[str, int, int] | None = None) -> None:
        y, test_y = torch.arange(40) % 3, torch.arange(8) % 3
        if bad is not None:
            (test_y if bad[0] == "test" else y)[bad[1]] = bad[2]
        self.x, self.y = torch.ones(40, 5), y
        self.test = ClientData(torch.ones(8, 5), test_y)

    def client(self, cid: int) -> ClientData:
        return ClientData(self.x[10 * cid : 10 * cid + 10], self.y[10 * cid : 10 * cid + 10])

    def n_samples(self, cid: int) -> int:
        return 10


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (("train", 13, 7), "data= _Labelled.client(1): label 7 of sample 3 is outside 0..2 (num_classes=3)"),
        (("train", 39, -1), "data= _Labelled.client(3): label -1 of sample 9 is outside 0..2 (num_classes=3)"),
        (("test", 2, 3), "data= _Labelled.test: label 3 of sample 2 is outside 0..2 (num_classes=3)"),
    ],
)
def test_labels_beyond_num_classes_are_refused_at_load_before_anything_is_written(
    bad: tuple[str, int, int], message: str, tmp_path: Path
) -> None:
    tree = {**_tree(clients_per_round=2), "data": {"dataset": "provided", "clients": 4}}
    out, db = tmp_path / "out", tmp_path / "runs.db"
    with pytest.raises(ConfigError) as refused:
        Simulation(tree, data=_Labelled(bad), out=out, db=db)
    assert str(refused.value) == message
    assert not out.exists() and not db.exists()  # no output directory, no failed run in a run store
    Simulation({**tree, "rounds": 1}, data=_Labelled(), out=out, db=db).run()  # the same data, labels in range
    assert (out / "summary.json").is_file()


@pytest.mark.parametrize(("value", "where"), [(float("nan"), "client(2): sample 4"), (float("inf"), "test: sample 1")])
def test_nan_or_infinite_inputs_are_refused_at_load(value: float, where: str, tmp_path: Path) -> None:
    """A NaN feature would make the model NaN in the first round: refused before anything is written."""
    data = _Labelled()
    if where.startswith("test"):
        data.test.x[1, 2] = value
    else:
        data.x[24, 0] = value  # client 2's sample 4
    tree = {**_tree(clients_per_round=2), "data": {"dataset": "provided", "clients": 4}}
    out, db = tmp_path / "out", tmp_path / "runs.db"
    with pytest.raises(ConfigError) as refused:
        Simulation(tree, data=data, out=out, db=db)
    assert str(refused.value) == f"data= _Labelled.{where}'s input holds NaN or infinite values"
    assert not out.exists() and not db.exists()


def test_a_data_factorys_labels_beyond_num_classes_are_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "inputs").mkdir()
    (tmp_path / "inputs" / "labelled_data.py").write_text(
        "from tests.test_api_safety import _Labelled\n\n\n"
        "def make(clients: int, seed: int) -> _Labelled:\n    return _Labelled(('train', 13, 7))\n"
    )
    monkeypatch.chdir(tmp_path / "inputs")  # a factory's module is found beside where fedsim runs
    data = "data={dataset: python, factory: 'labelled_data:make', clients: 4}"
    err = refused(tmp_path, capsys, ["rounds=3", "clients_per_round=2", data])
    assert (
        err == "fedsim: error: data.factory _Labelled.client(1): label 7 of sample 3 is outside 0..2 (num_classes=3)\n"
    )


def test_switching_a_variant_with_an_override_drops_the_old_variants_settings_with_a_note() -> None:
    with pytest.warns(UserWarning, match=r"data\.dataset=mnist drops data\.test_fraction"):
        cfg = load_config(ROOT / "examples" / "quickstart.yaml", ["data.dataset=mnist", "data.dir=/nowhere"])
    assert cfg.data.dataset == "mnist" and cfg.data.clients == 100  # what mnist takes is kept
    with pytest.raises(ConfigError, match=r"unknown key 'data\.test_fraction'"):  # one the override gave itself
        load_config(ROOT / "examples" / "quickstart.yaml", ["data.dataset=mnist", "data.test_fraction=0.2"])


def test_the_command_line_names_unset_when_a_file_key_does_not_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "run.yaml"
    config.write_text("data: {dataset: digits, clients: 10, bogus: 1}\nmodel: {kind: logistic}\n")
    with pytest.raises(SystemExit, match="2"):
        main(["run", str(config), "--set", "rounds=1", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert "unknown key 'data.bogus'" in err and "`--unset data.bogus` drops it" in err
