"""Hugging Face datasets on disk (save_to_disk) and image folders, on small files the tests generate:
natural partition by a column, fedsim and Flower Datasets partitioners, lazy reading, one-line errors."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

datasets = pytest.importorskip("datasets")

from fedsim.cli import main  # noqa: E402
from fedsim.config import ConfigError, parse_config  # noqa: E402
from fedsim.data.build import build_dataset  # noqa: E402
from fedsim.data.hf_disk import LazyRows  # noqa: E402
from fedsim.sim.rounds.engine import Engine  # noqa: E402


def blocks(count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """28x28 uint8 images: class k lights up a 7x7 block at one of ten places, plus noise."""
    labels = rng.integers(0, 10, count)
    xs = rng.integers(0, 40, (count, 28, 28)).astype(np.uint8)
    for img, k in zip(xs, labels, strict=True):
        r, c = divmod(int(k), 4)
        img[r * 7 : r * 7 + 7, c * 7 : c * 7 + 7] = 220
    return xs, labels


def femnist_like(path: Path, writers: int = 6, per_writer: int = 40, test: bool = True) -> Path:
    """A DatasetDict (train with a ``writer`` column, test) of FEMNIST-shaped images, saved to ``path``."""
    rng = np.random.default_rng(0)
    features = datasets.Features(
        {
            "image": datasets.Array2D((28, 28), "uint8"),
            "label": datasets.ClassLabel(names=[str(k) for k in range(10)]),
            "writer": datasets.Value("string"),
        }
    )
    x, y = blocks(writers * per_writer, rng)
    train = datasets.Dataset.from_dict(
        {"image": x, "label": y, "writer": [f"w{k % writers:04d}" for k in range(len(y))]}, features=features
    )
    if not test:
        train.save_to_disk(str(path))
        return path
    tx, ty = blocks(100, rng)
    held = datasets.Dataset.from_dict({"image": tx, "label": ty, "writer": ["t"] * 100}, features=features)
    datasets.DatasetDict({"train": train, "test": held}).save_to_disk(str(path))
    return path


def _data(path: Path, **extra: Any) -> dict[str, Any]:
    return {"dataset": "hf_disk", "path": str(path), "clients": 6, **extra}


@pytest.mark.slow
def test_natural_partition_by_column_trains_the_femnist_cnn(tmp_path: Path) -> None:
    path = femnist_like(tmp_path / "femnist")
    tree = {
        "name": "hf",
        "rounds": 5,
        "progress": False,
        "data": _data(path, partition={"kind": "natural", "column": "writer"}),
        "model": {"kind": "femnist_cnn"},
        "algorithm": {"kind": "fedavg", "lr": 0.05, "batch_size": 10},
    }
    engine = Engine(parse_config(tree), out_dir=tmp_path / "o", db_path=tmp_path / "r.db")
    assert engine.dataset.num_clients == 6 and engine.dataset.num_classes == 10
    assert engine.dataset.input_shape == (1, 28, 28) and engine.dataset.test.n_samples == 100  # the test split
    assert [engine.dataset.n_samples(k) for k in range(6)] == [40] * 6  # one client per writer
    assert float(engine.dataset.client(0).x.max()) == pytest.approx(220 / 255)
    summary = engine.run()
    assert summary.final_accuracy > 0.5  # chance is 0.1


def test_partitioners_fedsim_and_flower(tmp_path: Path) -> None:
    path = femnist_like(tmp_path / "femnist", test=False)
    for partition in (
        {"kind": "dirichlet", "alpha": 0.3},
        {"kind": "flwr", "partitioner": "DirichletPartitioner", "kwargs": {"partition_by": "label", "alpha": 0.3}},
        {"kind": "flwr", "partitioner": "flwr_datasets.partitioner:IidPartitioner"},
    ):
        cfg = parse_config({"data": _data(path, partition=partition, test_fraction=0.25)}).data
        ds = build_dataset(cfg, seed=0)
        sizes = [ds.n_samples(k) for k in range(6)]
        assert sum(sizes) + ds.test.n_samples == 240 and ds.test.n_samples == 60  # held out, then partitioned
        assert min(sizes) > 0
        if partition["kind"] != "flwr" or "Dirichlet" in str(partition["partitioner"]):
            assert max(sizes) > 1.5 * min(sizes)  # skewed
        seen = torch.cat([ds.client(k).x.flatten(1) for k in range(6)])
        assert torch.unique(seen, dim=0).shape[0] == seen.shape[0]  # disjoint rows


@pytest.mark.slow
def test_lazy_clients_read_the_same_rows_without_holding_the_population(tmp_path: Path) -> None:
    path = femnist_like(tmp_path / "many", writers=3500, per_writer=2, test=False)
    common = {"partition": {"kind": "natural", "column": "writer"}, "clients": 3500, "test_fraction": 0.01}
    eager_cfg = parse_config({"data": _data(path, **common)}).data
    lazy_cfg = parse_config({"data": _data(path, lazy=True, **common)}).data
    tracemalloc.start()
    eager = build_dataset(eager_cfg, seed=0)
    _, eager_peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    lazy = build_dataset(lazy_cfg, seed=0)
    _, lazy_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert isinstance(lazy, LazyRows) and lazy.num_clients == 3500 and lazy.input_shape == (1, 28, 28)
    for cid in (0, 1234, 3499):
        assert lazy.n_samples(cid) == eager.n_samples(cid)
        torch.testing.assert_close(lazy.client(cid).x, eager.client(cid).x)
        assert torch.equal(lazy.client(cid).y, eager.client(cid).y)
    train_bytes = 6930 * 28 * 28 * 4
    assert eager_peak > train_bytes and lazy_peak < train_bytes / 4, (eager_peak, lazy_peak)


def test_image_folders(tmp_path: Path) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for name, colour in (("red", 0), ("green", 1), ("blue", 2)):
        (tmp_path / "imgs" / name).mkdir(parents=True)
        for i in range(8):
            pixels = rng.integers(0, 60, (12, 10, 3)).astype(np.uint8)
            pixels[..., colour] = 250
            Image.fromarray(pixels).save(tmp_path / "imgs" / name / f"{i}.png")
    tree = {
        "name": "imgs",
        "rounds": 4,
        "progress": False,
        "data": {"dataset": "image_folder", "dir": str(tmp_path / "imgs"), "clients": 3, "size": [8, 8]},
        "model": {"kind": "mlp", "hidden": [16]},
        "algorithm": {"kind": "fedavg", "lr": 0.2, "batch_size": 4},
    }
    engine = Engine(parse_config(tree), out_dir=tmp_path / "o", db_path=tmp_path / "r.db")
    ds = engine.dataset
    assert ds.input_shape == (3, 8, 8) and ds.num_classes == 3
    assert sum(ds.n_samples(k) for k in range(3)) + ds.test.n_samples == 24
    assert engine.run().final_accuracy == 1.0  # colours are easy


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"label": "lable"}, "data.label: column 'lable' does not exist in "),
        ({"features": "pixels"}, "data.features: column 'pixels' does not exist in "),
        ({"partition": {"kind": "natural", "column": "author"}}, "data.partition.column: column 'author' does not"),
        ({"split": "validation"}, "data.split: "),
        (
            {"partition": {"kind": "natural", "column": "writer"}, "clients": 9},
            "column 'writer' has 6 distinct values: set data.clients: 6",
        ),
        ({"partition": {"kind": "flwr", "partitioner": "NoSuchPartitioner"}}, "data.partition.partitioner: "),
    ],
)
def test_bad_columns_and_paths_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: dict[str, Any], message: str
) -> None:
    path = femnist_like(tmp_path / "femnist")
    config = {"name": "bad", "progress": False, "rounds": 1, "data": _data(path, **extra)}
    run_file = tmp_path / "run.yaml"
    run_file.write_text(json.dumps(config))
    with pytest.raises(SystemExit) as exited:
        main(["run", str(run_file), "--out", str(tmp_path / "o"), "--db", str(tmp_path / "r.db")])
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and err.startswith("fedsim: error: ") and "\n" not in err, err
    assert message in err, err
    if "does not exist" in message:
        assert "columns are ['image', 'label', 'writer']" in err


def test_a_directory_that_is_not_a_saved_dataset(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="not a dataset saved by save_to_disk"):
        build_dataset(parse_config({"data": _data(tmp_path / "empty")}).data, seed=0)
    with pytest.raises(ConfigError, match="no dataset saved at"):
        parse_config({"data": _data(tmp_path / "missing")})
