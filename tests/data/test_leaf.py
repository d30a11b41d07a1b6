"""LEAF's JSON on small generated files: Shakespeare's character LSTM and FEMNIST's CNN train from them."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from fedsim.cli import main
from fedsim.config import ConfigError, parse_config
from fedsim.data.leaf import LETTERS
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine

TEXT = "to be, or not to be, that is the question: whether 'tis nobler in the mind to suffer. "


def _write(path: Path, users: dict[str, tuple[list[Any], list[Any]]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tree = {
        "users": list(users),
        "num_samples": [len(y) for _, y in users.values()],
        "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()},
    }
    path.write_text(json.dumps(tree))
    return path


def shakespeare(tmp: Path, users: int = 4, window: int = 20) -> tuple[Path, Path]:
    """Each user reads its own stretch of a repeated line: ``window`` characters in, the next one out."""
    text = TEXT * 8

    def samples(start: int, count: int) -> tuple[list[str], list[str]]:
        idx = [(start + 3 * k) % (len(text) - window - 1) for k in range(count)]
        return [text[i : i + window] for i in idx], [text[i + window] for i in idx]

    train = {f"speaker_{u}": samples(17 * u, 40) for u in range(users)}
    test = {f"speaker_{u}": samples(17 * u + 1, 10) for u in range(users)}
    return _write(tmp / "train" / "all_data_0.json", train).parent, _write(tmp / "test" / "test.json", test)


def femnist(tmp: Path, users: int = 4) -> tuple[Path, Path]:
    """28x28 images: class k lights up a 7x7 block at one of ten places, plus noise."""
    rng = np.random.default_rng(0)

    def images(count: int) -> tuple[list[list[float]], list[int]]:
        labels = rng.integers(0, 10, count)
        xs = rng.normal(0, 0.1, (count, 28, 28))
        for img, k in zip(xs, labels, strict=True):
            r, c = divmod(int(k), 4)
            img[r * 7 : r * 7 + 7, c * 7 : c * 7 + 7] += 1.0
        return xs.reshape(count, -1).round(3).tolist(), labels.tolist()

    train = {f"writer_{u}": images(30) for u in range(users)}
    test = {f"writer_{u}": images(15) for u in range(users)}
    return _write(tmp / "train.json", train), _write(tmp / "test.json", test)


def _run(tmp: Path, train: Path, test: Path, model: dict[str, Any], **extra: Any) -> Engine:
    tree: dict[str, Any] = {
        "name": "leaf",
        "seed": 0,
        "rounds": 6,
        "eval_every": 1,
        "progress": False,
        "data": {"dataset": "leaf", "train": str(train), "test": str(test), "clients": 4},
        "model": model,
        "algorithm": {"kind": "fedavg", "lr": 0.5, "batch_size": 10, "local_epochs": 1},
        **extra,
    }
    engine = Engine(parse_config(tree), out_dir=tmp / "out", db_path=tmp / "runs.db")
    engine.run()
    return engine


def test_the_shakespeare_lstm_learns_the_next_character(tmp_path: Path) -> None:
    train, test = shakespeare(tmp_path)
    engine = _run(
        tmp_path, train, test, {"kind": "shakespeare_lstm", "hidden": [32]}, rounds=8, task={"kind": "language_model"}
    )
    assert engine.dataset.num_clients == 4 and engine.dataset.num_classes == len(LETTERS) == 80
    with RunStore.open_readonly(tmp_path / "runs.db") as store:
        (run,) = store.list_runs()
        rows = store.rounds(run.run_id)
    perplexity = [json.loads(r.metrics_json)["test_perplexity"] for r in rows]
    assert len(perplexity) == 8
    assert perplexity[0] == pytest.approx(math.exp(rows[0].test_loss or 0.0))  # exp of the next-token loss
    assert perplexity[-1] < 0.7 * perplexity[0], perplexity  # it falls from where an untrained model starts
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["task"] == "language_model" and summary["final_metrics"]["perplexity"] == perplexity[-1]


def test_the_femnist_cnn_learns_leaf_images(tmp_path: Path) -> None:
    train, test = femnist(tmp_path)
    engine = _run(tmp_path, train, test, {"kind": "femnist_cnn"}, algorithm={"kind": "fedavg", "lr": 0.05})
    assert engine.dataset.input_shape == (784,) and engine.dataset.num_classes == 10
    assert engine.last_eval is not None and engine.last_eval.accuracy > 0.5  # chance is 0.1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"users": ["a"], "user_data": {"a": {"x": [[1.0]], "y": [0]}}}', None),
        ("not json at all", "not JSON (JSONDecodeError)"),
        ('{"clients": []}', "not LEAF JSON (no 'users' list)"),
        ('{"users": ["a"], "user_data": {"a": {"x": [[1.0]]}}}', "user 'a' has no 'x' and 'y' lists"),
        ('{"users": ["a"], "user_data": {"a": {"x": [[1.0], [2.0]], "y": [0]}}}', "user 'a' has 2 x but 1 y"),
    ],
)
def test_a_file_that_is_not_leaf_is_one_line_and_exit_2(
    content: str, message: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bad.json").write_text(content)
    good_train, _ = femnist(tmp_path / "good")
    config = {
        "name": "bad",
        "progress": False,
        "rounds": 1,
        "data": {"dataset": "leaf", "train": str(good_train), "test": str(tmp_path / "bad.json"), "clients": 4},
        "model": {"kind": "mlp", "hidden": [8]},
    }
    path = tmp_path / "run.json.yaml"
    path.write_text(json.dumps(config))
    args = ["run", str(path), "--out", str(tmp_path / "o"), "--db", str(tmp_path / "r.db")]
    if message is None:  # a well-formed file whose samples do not match the training images
        message = "test samples of shape [1] do not match training [784]"
    with pytest.raises(SystemExit) as exited:
        main(args)
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedsim: error: ") and message in err and "\n" not in err


def test_more_clients_than_users_is_refused(tmp_path: Path) -> None:
    train, test = femnist(tmp_path)
    with pytest.raises(ConfigError, match=r"data\.clients=9, but .* has 4 users"):
        Engine(
            parse_config(
                {
                    "data": {"dataset": "leaf", "train": str(train), "test": str(test), "clients": 9},
                    "progress": False,
                }
            ),
            out_dir=tmp_path / "o",
            db_path=tmp_path / "r.db",
        )


def test_lazy_leaf_reads_the_same_clients_from_memory_mapped_files(tmp_path: Path) -> None:
    """Two training files: lazily each is parsed alone and kept on disk; clients and weights equal eager's."""
    train, test = femnist(tmp_path, users=6)
    users = json.loads(train.read_text())
    for k, part in enumerate((users["users"][:4], users["users"][4:])):
        _write(
            tmp_path / "split" / f"part{k}.json",
            {u: (users["user_data"][u]["x"], users["user_data"][u]["y"]) for u in part},
        )
    engines = []
    for lazy in (False, True):
        engine = _run(
            tmp_path / f"lazy{lazy}",
            tmp_path / "split",
            test,
            {"kind": "femnist_cnn"},
            rounds=2,
            data={"dataset": "leaf", "train": str(tmp_path / "split"), "test": str(test), "clients": 5, "lazy": lazy},
        )
        engines.append(engine)
    eager, lazy_engine = engines
    assert type(lazy_engine.dataset).__name__ == "LeafOnDisk"
    for cid in range(5):
        assert torch.equal(eager.dataset.client(cid).x, lazy_engine.dataset.client(cid).x)
        assert torch.equal(eager.dataset.client(cid).y, lazy_engine.dataset.client(cid).y)
    assert torch.equal(eager.global_state, lazy_engine.global_state)


def test_lazy_leaf_refuses_a_user_in_two_files(tmp_path: Path) -> None:
    train, test = femnist(tmp_path, users=2)
    users = json.loads(train.read_text())
    record = {u: (users["user_data"][u]["x"], users["user_data"][u]["y"]) for u in users["users"]}
    _write(tmp_path / "dup" / "a.json", record)
    _write(tmp_path / "dup" / "b.json", record)
    cfg = {"dataset": "leaf", "train": str(tmp_path / "dup"), "test": str(test), "clients": 3, "lazy": True}
    with pytest.raises(ConfigError, match="user 'writer_0' is also in an earlier file"):
        Engine(parse_config({"data": cfg, "progress": False}), out_dir=tmp_path / "o", db_path=tmp_path / "r.db")
