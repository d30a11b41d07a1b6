"""Each tracking backend, read back with that backend's own reader after the quickstart's first 3 rounds: the
CSV with pandas, TensorBoard's event accumulator, W&B's offline run log with ``wandb leet inspect``. The
reference is the run store's rounds, which the trackers do not read."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedsim.cli import main
from fedsim.runstore import RunStore
from fedsim.tracking import round_metrics
from tests.conftest import QUICKSTART
from tests.readback import wandb_records

pytest.importorskip("tensorboard")
pytest.importorskip("wandb")


@pytest.fixture(scope="module")
def tracked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, float]]]:
    """The quickstart for 3 rounds with every backend; the run store's metrics of each round."""
    tmp = tmp_path_factory.mktemp("tracked")
    out, db = tmp / "out", tmp / "runs.db"
    sets = ["rounds=3", "progress=false", "eval_every=2", "tracking=[csv,tensorboard,wandb]"]
    argv = ["run", str(QUICKSTART), *(a for s in sets for a in ("--set", s)), "--out", str(out), "--db", str(db)]
    assert main(argv) == 0
    with RunStore.open_readonly(db) as store:
        (run,) = store.list_runs()
        rows = store.rounds(run.run_id)
    return out, [round_metrics(row) for row in rows]


def test_the_csv_reads_back_with_pandas(tracked: tuple[Path, list[dict[str, float]]]) -> None:
    import pandas as pd

    out, stored = tracked
    frame = pd.read_csv(out / "metrics.csv")
    assert list(frame["round"]) == [1, 2, 3]
    assert list(frame["train_loss"]) == [m["train_loss"] for m in stored]  # every digit
    assert list(frame["bytes_up"]) == [m["bytes_up"] for m in stored] and frame["bytes_up"].dtype.kind == "i"
    assert frame["test_accuracy"].isna().tolist() == [True, False, False]  # evaluated at rounds 2 and 3
    assert frame["test_accuracy"].iloc[2] == stored[2]["test_accuracy"]


def test_tensorboard_reads_back_with_its_event_accumulator(tracked: tuple[Path, list[dict[str, float]]]) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, stored = tracked
    (events,) = (p.parent for p in (out / "tensorboard").rglob("events.out.tfevents.*"))
    acc = EventAccumulator(str(events))
    acc.Reload()
    assert {"train_loss", "test_accuracy", "bytes_up", "bytes_down", "wall_s"} <= set(acc.Tags()["scalars"])
    loss = acc.Scalars("train_loss")
    assert [e.step for e in loss] == [1, 2, 3]
    assert [e.value for e in loss] == pytest.approx([m["train_loss"] for m in stored], rel=1e-6)  # float32
    assert [e.step for e in acc.Scalars("test_accuracy")] == [2, 3]


def test_wandb_offline_reads_back_with_wandb_leet_inspect(tracked: tuple[Path, list[dict[str, float]]]) -> None:
    out, stored = tracked
    records = wandb_records(out)
    history = [r["history"] for r in records if r["type"] == "history"]
    assert [h["step"]["num"] for h in history] == [1, 2, 3]
    assert [h["item"]["train_loss"] for h in history] == [m["train_loss"] for m in stored]
    assert history[2]["item"]["test_accuracy"] == stored[2]["test_accuracy"]
    (run,) = (r["run"] for r in records if r["type"] == "run")
    assert run["display_name"].startswith("quickstart") and run["project"] == "fedsim"
    assert run["config"]["update"]["rounds"] == 3  # the run's config, as W&B shows it


def test_a_resumed_run_goes_on_in_the_same_csv_without_the_rounds_it_trains_again(tmp_path: Path) -> None:
    """Stopped after round 3 with its checkpoint after round 2, the run resumes from round 2: the CSV keeps
    rounds 1-2, drops the interrupted run's round 3 and ends with each of rounds 1-6 once, as the run store."""
    import pandas as pd

    from fedsim.config import parse_config
    from fedsim.sim.rounds.engine import Engine
    from tests.conftest import tiny_config

    tree = tiny_config(rounds=6, checkpoint={"every": 2}, tracking=["csv"])
    Engine(parse_config(tree), tmp_path / "out", tmp_path / "runs.db").run(after_round=lambda row: row.round == 2)
    assert list(pd.read_csv(tmp_path / "out" / "metrics.csv")["round"]) == [1, 2, 3]
    Engine(parse_config(tree), tmp_path / "out", tmp_path / "runs.db", resume=True).run()
    frame = pd.read_csv(tmp_path / "out" / "metrics.csv")
    assert list(frame["round"]) == [1, 2, 3, 4, 5, 6]
    with RunStore.open_readonly(tmp_path / "runs.db") as store:
        (run,) = store.list_runs()
        assert list(frame["train_loss"]) == [r.train_loss for r in store.rounds(run.run_id)]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["csv", "csv"], "tracking names csv twice"),
        (["mlflow"], "tracking.backends.0: Input should be 'csv', 'tensorboard' or 'wandb'"),
    ],
)
def test_a_bad_tracking_list_is_one_line(value: list[str], message: str) -> None:
    from fedsim.config import ConfigError, parse_config
    from tests.conftest import tiny_config

    with pytest.raises(ConfigError) as caught:
        parse_config(tiny_config(tracking=value))
    assert message in str(caught.value) and "\n" not in str(caught.value)
