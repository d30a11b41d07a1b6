"""SST-2 and a folder of text as federated datasets of token ids: shapes, next-token targets worked by hand,
the Dirichlet split's sentiment skew, the tokenised-array cache, the text folder's clients and test split, and
the one-line refusals. The real SST-2 (../shared/data/sst2) is needed by the skew test only, which skips
without it; the rest use small TSVs written here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from transformers import AutoTokenizer

from fedsim.config import ConfigError, Sst2Data, TextData, parse_config
from fedsim.data import build_dataset
from fedsim.data import text as text_module
from fedsim.models.hf import default_path
from tests.conftest import tiny_config
from tests.split_fixtures import NEGATIVE, POSITIVE

SST2 = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "sst2"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """The packaged MiniLM tokenizer, read here on its own: the reference the datasets' ids are checked against."""
    return AutoTokenizer.from_pretrained(default_path(), local_files_only=True)


def _tsvs(directory: Path, train: list[tuple[str, int]], test: list[tuple[str, int]]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("test", test)):
        (directory / f"{name}.tsv").write_text("sentence\tlabel\n" + "".join(f"{s}\t{y}\n" for s, y in rows))
    return directory


def _sst2(directory: Path, **settings: Any) -> Sst2Data:
    return Sst2Data(dataset="sst2", dir=directory, **{"clients": 2, **settings})


def test_labels_give_token_id_inputs_and_sentiment_targets(sst2_dir: Path, tokenizer: Any) -> None:
    data = build_dataset(_sst2(sst2_dir, clients=4, max_length=16), seed=0)
    assert data.num_clients == 4 and data.num_classes == 2 and data.input_shape == (16,)
    assert sum(data.n_samples(c) for c in range(4)) == 40  # write_sst2: 10 sentences, 4 times
    assert data.test.x.shape == (10, 16) and data.test.y.tolist() == [1] * 5 + [0] * 5
    first = tokenizer(POSITIVE[0], padding="max_length", max_length=16)["input_ids"]
    assert data.test.x[0].long().tolist() == first


def test_next_token_targets_are_the_ids_shifted_by_one_with_padding_and_the_end_ignored(
    tmp_path: Path, tokenizer: Any
) -> None:
    """Worked by hand from the tokenizer's own ids: "a fine film" is [CLS] a fine film [SEP] then padding; the
    target at position t is the token at t + 1, and -100 from [SEP] (nothing follows it) on. A sentence cut at
    max_length has no next token at its last position either."""
    short, long = "a fine film", "an utterly absorbing , quietly devastating portrait of grief and memory"
    directory = _tsvs(tmp_path / "sst2", [(short, 1), (long, 0)], [(short, 1)])
    data = build_dataset(_sst2(directory, max_length=8, target="next_token", clients=1), seed=0)
    ids = tokenizer(short)["input_ids"]
    cls, a, fine, film, sep = ids
    assert (cls, sep) == (tokenizer.cls_token_id, tokenizer.sep_token_id) and len(ids) == 5
    pad = tokenizer.pad_token_id
    assert data.num_classes == len(tokenizer) == 30522
    assert data.test.x[0].long().tolist() == [cls, a, fine, film, sep, pad, pad, pad]
    assert data.test.y[0].tolist() == [a, fine, film, sep, -100, -100, -100, -100]
    cut = tokenizer(long, truncation=True, max_length=8)["input_ids"]  # 8 ids: [CLS], 6 words, [SEP]
    x, y = data.client(0).x, data.client(0).y
    row = [r for r in range(2) if x[r].long().tolist() == cut]
    assert len(row) == 1 and y[row[0]].tolist() == [*cut[1:], -100]


def test_a_dirichlet_split_of_sst2_skews_each_clients_sentiment(tmp_path: Path) -> None:
    """Dirichlet(0.1) over the two sentiment labels leaves most clients mostly one sentiment; iid leaves every
    client near the population's share (the partition is fedsim's; the labels are the TSV's)."""
    rows = [(f"{w} film number {i}", int(w == "good")) for i, w in enumerate(["good", "bad"] * 2000)]
    directory = _tsvs(tmp_path / "sst2", rows, rows[:4])
    directory = SST2 if (SST2 / "train.tsv").is_file() else directory
    shares = {}
    for kind, partition in (("dirichlet", {"kind": "dirichlet", "alpha": 0.1}), ("iid", {"kind": "iid"})):
        data = build_dataset(_sst2(directory, clients=10, limit=4000, max_length=8, partition=partition), seed=0)
        shares[kind] = np.array([data.client(c).y.float().mean().item() for c in range(10)])
    population = shares["iid"].mean()
    assert np.abs(shares["iid"] - population).max() < 0.1  # 400 sentences a client: 2.5 points of sd
    skewed = np.minimum(shares["dirichlet"], 1 - shares["dirichlet"])  # the minority sentiment's share
    assert np.median(skewed) < 0.2, shares["dirichlet"]


@pytest.mark.slow  # tokenises 61,486 sentences: about 9 s
@pytest.mark.skipif(not (SST2 / "train.tsv").is_file(), reason="needs ../shared/data/sst2")
def test_the_shared_sst2_splits_all_60614_training_sentences_and_tests_on_the_872_of_glue_dev() -> None:
    data = build_dataset(_sst2(SST2, clients=100, max_length=32, target="next_token"), seed=0)
    assert sum(data.n_samples(c) for c in range(100)) == 60_614 and data.test.n_samples == 872
    assert data.test.y.shape == (872, 32) and data.num_classes == 30522


def test_the_cache_gives_the_same_arrays_without_the_tokenizer_and_keys_on_max_length(
    sst2_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    before = sorted(os.listdir(sst2_dir))
    first = build_dataset(_sst2(sst2_dir, target="next_token", max_length=12, cache=cache), seed=0)
    assert len(list(cache.glob("tokens-*.npz"))) == 2  # the training and the test sentences
    assert sorted(os.listdir(sst2_dir)) == before  # nothing is written beside the data

    def no_tokenizer(path: object) -> None:
        raise AssertionError("the tokenizer was loaded: the cache missed")

    monkeypatch.setattr(text_module, "load_tokenizer", no_tokenizer)
    again = build_dataset(_sst2(sst2_dir, target="next_token", max_length=12, cache=cache), seed=0)
    assert again.num_classes == first.num_classes
    for c in range(2):
        assert again.client(c).x.equal(first.client(c).x) and again.client(c).y.equal(first.client(c).y)
    with pytest.raises(AssertionError, match="the cache missed"):  # another max_length is another key
        build_dataset(_sst2(sst2_dir, target="next_token", max_length=10, cache=cache), seed=0)


def _folder(root: Path, files: dict[str, list[str]]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, lines in files.items():
        (root / name).write_text("\n".join(lines) + "\n\n")  # a blank line is no sentence
    return root


def test_a_text_folder_is_one_client_a_file_with_each_files_last_lines_held_out(tmp_path: Path) -> None:
    files = {"a.txt": POSITIVE * 2, "b.txt": NEGATIVE, "c.txt": ["only one line"], "d.txt": ["not taken"]}
    root = _folder(tmp_path / "text", files)
    cfg = TextData(dataset="text", dir=root, clients=3, test_fraction=0.2, max_length=10)
    data = build_dataset(cfg, seed=0)
    assert data.num_clients == 3 and data.num_classes == 30522 and data.input_shape == (10,)
    assert [data.n_samples(c) for c in range(3)] == [8, 4, 1]  # 10 - 2, 5 - 1, and a lone line kept
    assert data.test.n_samples == 3
    assert data.client(2).y[0].tolist()[:4] == data.client(2).x[0].long().tolist()[1:5]  # shifted by one
    held = _folder(tmp_path / "held", {"test.txt": ["a held out line", "another one"]})
    named = build_dataset(cfg.model_copy(update={"test": held / "test.txt"}), seed=0)
    assert [named.n_samples(c) for c in range(3)] == [10, 5, 1] and named.test.n_samples == 2


@pytest.mark.parametrize(
    ("files", "clients", "message"),
    [
        ({"a.txt": ["x"]}, 2, r"holds 1 \.txt files; data.clients is 2"),
        ({"a.txt": ["x"], "b.txt": []}, 2, r"b\.txt: no text"),
    ],
)
def test_a_text_folder_short_of_files_or_text_is_one_line(
    tmp_path: Path, files: dict[str, list[str]], clients: int, message: str
) -> None:
    root = _folder(tmp_path / "text", files)
    with pytest.raises(ConfigError, match=message):
        build_dataset(TextData(dataset="text", dir=root, clients=clients), seed=0)


def test_a_directory_without_a_tokenizer_is_one_line(sst2_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^data.tokenizer: no tokenizer at .*nowhere \("):
        build_dataset(_sst2(sst2_dir, tokenizer=tmp_path / "nowhere"), seed=0)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"task": {"kind": "classification"}}, "gives next-token targets: set task.kind: language_model"),
        ({"task": {"kind": "language_model", "ignore_index": 0}}, "pads next-token targets with -100"),
        ({"data__target": "label"}, "data.target=label gives sentiment labels"),
        ({"model": {"kind": "hf_causal_lm", "path": "/models/gpt2"}}, "set data.tokenizer to its tokenizer"),
        ({"model": {"kind": "hf_causal_lm"}}, "takes one of path .* or config"),
        ({"model": {"kind": "mlp", "config": {"model_type": "gpt2"}}}, "model.config goes with kind hf_causal_lm"),
    ],
)
def test_text_that_does_not_fit_the_task_or_model_is_refused_in_one_line(
    overrides: dict[str, Any], message: str
) -> None:
    base = {
        "data": {"dataset": "sst2", "clients": 10, "target": "next_token"},
        "task": {"kind": "language_model"},
        "model": {"kind": "hf_causal_lm", "config": {"model_type": "gpt2"}},
    }
    with pytest.raises(ConfigError, match=message):
        parse_config(tiny_config(**{**base, **overrides}))
