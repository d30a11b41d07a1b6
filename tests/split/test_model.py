"""Splitting all-MiniLM-L6-v2 at any layer computes exactly what the whole encoder computes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from fedsim.split.model import SplitError, load_encoder, minilm_path, split_encoder

SENTENCES = ["a gripping, funny and humane film", "it is not worth the price of admission .", "meh"]


@pytest.fixture(scope="module")
def batch() -> dict[str, torch.Tensor]:
    tokenizer = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)
    return dict(tokenizer(SENTENCES, padding=True, return_tensors="pt"))


@pytest.mark.parametrize("k", [0, 2, 4, 6])
def test_top_of_bottom_equals_the_whole_encoder(k: int, batch: dict[str, torch.Tensor]) -> None:
    encoder = load_encoder()
    bottom, top = split_encoder(encoder, k, num_labels=2)
    mask = batch["attention_mask"]
    with torch.no_grad():
        whole = encoder(input_ids=batch["input_ids"], attention_mask=mask).last_hidden_state
        weights = mask.unsqueeze(-1).float()
        pooled = (whole * weights).sum(1) / weights.sum(1)
        split = top.features(bottom(batch["input_ids"], mask), mask)
    assert mask.min() == 0  # the batch has padding, so the mask matters
    torch.testing.assert_close(split, pooled, rtol=0, atol=1e-5)


def test_minilm_embeddings_are_the_published_model(batch: dict[str, torch.Tensor]) -> None:
    """Related sentences are closer than unrelated ones: the weights are trained, not a random init."""
    encoder = load_encoder()
    bottom, top = split_encoder(encoder, 3, num_labels=2)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)
    enc = tokenizer(["a great movie", "an excellent film", "the stock market fell"], padding=True, return_tensors="pt")
    with torch.no_grad():
        emb = torch.nn.functional.normalize(
            top.features(bottom(enc["input_ids"], enc["attention_mask"]), enc["attention_mask"])
        )
    assert float(emb[0] @ emb[1]) > float(emb[0] @ emb[2]) + 0.3


def test_bad_split_point_and_path_name_the_problem(tmp_path: Path) -> None:
    encoder = load_encoder()
    with pytest.raises(SplitError, match=r"model.split_layer=7 is outside 0..6"):
        split_encoder(encoder, 7, num_labels=2)
    with pytest.raises(SplitError, match=r"no config\.json"):
        load_encoder(tmp_path)
