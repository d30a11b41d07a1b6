from pathlib import Path

import numpy as np
import pytest

from fedsim.config import ConfigError
from fedsim.data.sst2 import load_sst2, read_tsv

SST2 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "sst2"


def test_reads_sentences_and_labels(tmp_path: Path) -> None:
    path = tmp_path / "train.tsv"
    path.write_text("sentence\tlabel\na fine film \t1\ndull\t0\n")
    data = read_tsv(path)
    assert data.texts == ["a fine film", "dull"]
    assert data.labels.tolist() == [1, 0]
    assert data.take([1]).texts == ["dull"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("text\tlabel\nx\t1\n", "header"),
        ("sentence\tlabel\nx\t2\n", ":2: expected"),
        ("sentence\tlabel\nno tab here\n", ":2: expected"),
        ("sentence\tlabel\n", "no sentences"),
    ],
)
def test_bad_files_are_named(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "bad.tsv"
    path.write_text(body)
    with pytest.raises(ConfigError, match=message):
        read_tsv(path)


@pytest.mark.skipif(not SST2.is_dir(), reason="../shared/data/sst2 is absent")
def test_shared_sst2_sizes() -> None:
    test = load_sst2(SST2, "test")
    assert len(test) == 872
    assert set(np.unique(test.labels)) == {0, 1}
    assert len(load_sst2(SST2, "train", limit=100)) == 100
