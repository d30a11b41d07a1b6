"""Datasets: shapes, ranges and splits a user relies on; file errors name the problem."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import fedsim.cores
from fedsim.config import ConfigError, DigitsData, FileData, RandomData, SyntheticData
from fedsim.data import build_dataset


def test_digits_shapes_ranges_and_test_split() -> None:
    ds = build_dataset(DigitsData(dataset="digits", clients=30), seed=0)
    assert ds.input_shape == (1, 8, 8) and ds.num_classes == 10 and ds.num_clients == 30
    assert abs(ds.test.n_samples - round(0.2 * 1797)) <= 1
    train = sum(ds.n_samples(c) for c in range(30))
    assert train + ds.test.n_samples == 1797
    x = ds.client(3).x
    assert x.dtype == torch.float32 and float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert sorted(torch.unique(ds.test.y).tolist()) == list(range(10))


def test_synthetic_clients_differ_in_labels_and_size() -> None:
    ds = build_dataset(SyntheticData(dataset="synthetic", alpha=1, beta=1, clients=30), seed=0)
    sizes = [ds.n_samples(c) for c in range(30)]
    assert ds.input_shape == (60,) and max(sizes) > 3 * min(sizes)
    top = [int(torch.bincount(ds.client(c).y, minlength=10).argmax()) for c in range(30)]
    assert len(set(top)) >= 3  # clients' majority labels differ: the data is heterogeneous
    again = build_dataset(SyntheticData(dataset="synthetic", alpha=1, beta=1, clients=30), seed=0)
    assert torch.equal(ds.client(7).x, again.client(7).x)


def _table(n: int = 50) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 3)).astype(np.float32), rng.choice(["cat", "dog", "eel"], n)


def test_npz_csv_parquet_round_trip(tmp_path: Path) -> None:
    x, y = _table()
    np.savez(tmp_path / "d.npz", x=x, y=y)
    header = "a,b,c,label\n" + "".join(f"{r[0]},{r[1]},{r[2]},{lab}\n" for r, lab in zip(x, y, strict=True))
    (tmp_path / "d.csv").write_text(header)
    pq.write_table(pa.table({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "label": y}), tmp_path / "d.parquet")
    for name in ("d.npz", "d.csv", "d.parquet"):
        ds = build_dataset(FileData(dataset="file", path=tmp_path / name, clients=4), seed=0)
        assert ds.num_classes == 3 and ds.input_shape == (3,) and ds.test.n_samples == 10
        assert sum(ds.n_samples(c) for c in range(4)) == 40


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("noy.npz", {"x": np.zeros((4, 2))}, "missing array 'y'"),
        ("len.npz", {"x": np.zeros((4, 2)), "y": np.zeros(3)}, "x has 4 samples but y has 3"),
        ("nan.npz", {"x": np.full((4, 2), np.nan), "y": np.zeros(4)}, "NaN or infinite"),
        ("nolabel.csv", "a,b\n1,2\n3,4\n", "no label column 'label'; columns are ['a', 'b']"),
        ("text.csv", "a,label\nx,1\ny,0\n", "feature column 'a' is string, not numeric"),
        ("bad.parquet", "not parquet", "cannot read table"),
    ],
)
def test_bad_files_raise_one_clear_error(tmp_path: Path, name: str, content: object, message: str) -> None:
    path = tmp_path / name
    if isinstance(content, dict):
        np.savez(path, **content)
    else:
        path.write_text(str(content))
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")) as exc:
        build_dataset(FileData(dataset="file", path=path, clients=2), seed=0)
    assert str(path) in str(exc.value) and "\n" not in str(exc.value)


def test_random_lazy_is_stable_and_holds_no_client_data() -> None:
    cfg = RandomData(dataset="random", clients=10_000, samples_per_client=64, features=784, lazy=True)
    ds = build_dataset(cfg, seed=0)
    a, b = ds.client(5), ds.client(5)
    assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y) and a.x.shape == (64, 784)
    assert not torch.equal(a.x, ds.client(6).x)
    held = [v for v in vars(ds).values() if isinstance(v, torch.Tensor)]
    assert held == []  # only the test split (inside ClientData) is kept in memory
    eager = build_dataset(RandomData(dataset="random", clients=10, samples_per_client=64, features=784), seed=0)
    assert eager.client(9).x.shape == (64, 784) and eager.n_samples(9) == 64


@pytest.mark.parametrize("cores", [1, 3])
def test_random_eager_holds_the_lazy_clients_whatever_the_threads_drawing_them(
    cores: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fedsim.cores, "cores_per_rank", lambda world=1: cores)
    common = {"dataset": "random", "clients": 7, "samples_per_client": 5, "features": 3, "classes": 4}
    eager = build_dataset(RandomData(**common), seed=2)
    lazy = build_dataset(RandomData(**common, lazy=True), seed=2)
    for cid in range(7):
        assert torch.equal(eager.client(cid).x, lazy.client(cid).x)
        assert torch.equal(eager.client(cid).y, lazy.client(cid).y)
    assert torch.equal(eager.test.x, lazy.test.x)
    first = torch.Generator().manual_seed(2 * 1_000_003 + 1)  # client 0: features, then labels, from (seed, 0)
    assert torch.equal(eager.client(0).x, torch.randn(5, 3, generator=first))
    assert torch.equal(eager.client(0).y, torch.randint(0, 4, (5,), generator=first))
    assert len({float(eager.client(c).x.sum()) for c in range(7)}) == 7  # no client drawn twice
