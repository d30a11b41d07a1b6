"""SST-2 as a federated dataset of token ids (``data.dataset: sst2``): the training sentences split among
clients by a partition over their sentiment labels, GLUE's dev set (test.tsv) as the test split.

Apart from :mod:`fedsim.data.sst2`, which an edge device imports to read its sentences without torch.
"""

from __future__ import annotations

import numpy as np
import torch

from fedsim.config import Sst2Data
from fedsim.data.base import ArrayDataset, ClientData
from fedsim.data.partition import partition
from fedsim.data.sst2 import load_sst2
from fedsim.data.text import causal_lm_data, tokenise


def sst2(cfg: Sst2Data, seed: int) -> ArrayDataset:
    """``cfg.dir``'s train.tsv (its first ``cfg.limit`` rows) split among ``cfg.clients`` by ``cfg.partition``,
    test.tsv as the test split; inputs are token ids, targets the labels (2 classes) or the next tokens
    (:mod:`fedsim.data.text`)."""
    train, test = load_sst2(cfg.dir, "train", limit=cfg.limit), load_sst2(cfg.dir, "test")
    parts = partition(cfg.partition, train.labels, cfg.clients, np.random.default_rng(seed))
    train_ids = tokenise(train.texts, cfg.tokenizer, cfg.max_length, cfg.cache)
    test_ids = tokenise(test.texts, cfg.tokenizer, cfg.max_length, cfg.cache)
    if cfg.target == "next_token":
        return causal_lm_data(train_ids, parts, test_ids)
    held = ClientData(torch.from_numpy(test_ids.ids.astype(np.float32)), torch.from_numpy(test.labels))
    return ArrayDataset(train_ids.ids.astype(np.float32), train.labels, parts, held, num_classes=2)
