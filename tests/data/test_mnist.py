"""MNIST's IDX files (../shared/data/mnist; skipped without it) and a malformed IDX file."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from fedsim.config import ConfigError, MnistData
from fedsim.data.mnist import IMAGES, mnist, read_idx

SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "mnist"


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data/mnist is not here")
def test_mnist_reads_60000_training_and_10000_test_images_into_skewed_clients() -> None:
    data = mnist(MnistData(dataset="mnist", dir=SHARED, clients=100, partition={"kind": "dirichlet", "alpha": 0.3}), 0)
    assert data.num_clients == 100 and data.num_classes == 10 and data.input_shape == (1, 28, 28)
    assert sum(data.n_samples(c) for c in range(100)) == 60_000
    assert data.test.n_samples == 10_000
    assert float(data.test.x.max()) == 1.0 and float(data.test.x.min()) == 0.0
    one = data.client(0)
    assert len(set(one.y.tolist())) < 10 or data.n_samples(0) > 0  # skewed, not empty


def test_a_file_that_is_not_idx_is_refused(tmp_path: Path) -> None:
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(b"\x00\x00\x08\x01" + b"\x00" * 12))
    with pytest.raises(ConfigError, match="not an IDX file of images"):
        read_idx(tmp_path / "train-images-idx3-ubyte", IMAGES)
    header = (IMAGES).to_bytes(4, "big") + (2).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(header + b"\x00" * 100))
    with pytest.raises(ConfigError, match=r"header says \[2, 28, 28\], file holds 100 values"):
        read_idx(tmp_path / "train-images-idx3-ubyte", IMAGES)
    with pytest.raises(ConfigError, match="MNIST file not found"):
        read_idx(tmp_path / "t10k-labels-idx1-ubyte", IMAGES)
