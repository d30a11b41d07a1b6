"""Partitioners: disjoint, covering, non-empty, seeded, and as skewed as they claim."""

from __future__ import annotations

import numpy as np
import pytest

from fedsim.config import (
    ConfigError,
    DirichletPartition,
    IidPartition,
    LabelSkewPartition,
    Partition,
    QuantitySkewPartition,
    ShardsPartition,
)
from fedsim.data.partition import partition

LABELS = np.repeat(np.arange(10), 100)  # 1,000 samples, 10 balanced classes
SCHEMES: list[Partition] = [
    IidPartition(),
    DirichletPartition(kind="dirichlet", alpha=0.3),
    ShardsPartition(kind="shards", labels_per_client=2),
    LabelSkewPartition(kind="label_skew", skew=0.6),
    QuantitySkewPartition(kind="quantity_skew", alpha=0.5),
]


def _split(scheme: Partition, clients: int = 20, seed: int = 0, labels: np.ndarray = LABELS) -> list[np.ndarray]:
    return partition(scheme, labels, clients, np.random.default_rng(seed))


@pytest.mark.parametrize("scheme", SCHEMES, ids=lambda s: s.kind)
def test_disjoint_covering_nonempty_and_seeded(scheme: Partition) -> None:
    parts = _split(scheme)
    flat = np.concatenate(parts)
    assert len(parts) == 20
    assert sorted(flat.tolist()) == list(range(len(LABELS)))  # every sample exactly once
    assert min(len(p) for p in parts) >= 1
    again = _split(scheme)
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))
    other = _split(scheme, seed=1)
    assert not all(np.array_equal(a, b) for a, b in zip(parts, other, strict=True))


def _mean_distinct_labels(parts: list[np.ndarray]) -> float:
    return float(np.mean([len(np.unique(LABELS[p])) for p in parts]))


def test_dirichlet_alpha_controls_label_skew() -> None:
    skewed = _mean_distinct_labels(_split(DirichletPartition(kind="dirichlet", alpha=0.1)))
    mild = _mean_distinct_labels(_split(DirichletPartition(kind="dirichlet", alpha=100.0)))
    assert skewed < 5.0 < 9.5 < mild


def test_shards_give_at_most_labels_per_client() -> None:
    parts = _split(ShardsPartition(kind="shards", labels_per_client=2))
    assert max(len(np.unique(LABELS[p])) for p in parts) <= 2
    assert {len(p) for p in parts} == {50}  # 40 shards of 25


def test_label_skew_full_and_none() -> None:
    full = _split(LabelSkewPartition(kind="label_skew", skew=1.0), clients=5)
    assert [sorted(np.unique(LABELS[p]).tolist()) for p in full] == [[k, k + 5] for k in range(5)]
    none = _split(LabelSkewPartition(kind="label_skew", skew=0.0), clients=5)
    for p in none:
        hist = np.bincount(LABELS[p], minlength=10) / len(p)
        assert len(np.unique(LABELS[p])) == 10 and hist.max() < 0.2


def test_label_skew_fraction_is_respected() -> None:
    parts = _split(LabelSkewPartition(kind="label_skew", skew=0.6), clients=5)
    own = sum(int(np.isin(LABELS[p], [k, k + 5]).sum()) for k, p in enumerate(parts))
    # 60% by label plus the 1/5 of the iid 40% that lands on the owning partition by chance
    assert abs(own / len(LABELS) - (0.6 + 0.4 * 2 / 10)) < 0.05


def test_quantity_skew_spreads_sizes() -> None:
    sizes = [len(p) for p in _split(QuantitySkewPartition(kind="quantity_skew", alpha=0.5, min_samples=3))]
    assert min(sizes) >= 3 and max(sizes) > 4 * np.median(sizes) / 2
    assert np.std(sizes) > np.std([len(p) for p in _split(IidPartition())]) + 10


def test_more_clients_than_samples_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"data\.clients=20 exceeds the 10 training samples"):
        _split(IidPartition(), clients=20, labels=np.arange(10))


def test_shards_are_mcmahan_et_als_pathological_non_iid_split_of_mnist() -> None:
    """McMahan et al. 2017, Section 3: "sort the data by digit label, divide it into 200 shards of size 300, and
    assign each of 100 clients 2 shards". The reference is that sentence written out here on labels with
    MNIST's training-set class counts: sorted by (label, index), cut into 200 runs of 300; each client must
    hold exactly two whole runs, every run going to one client."""
    counts = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]  # MNIST's 60,000 training labels
    labels = np.random.default_rng(7).permutation(np.repeat(np.arange(10), counts))
    by_digit = sorted(range(len(labels)), key=lambda i: (labels[i], i))
    reference = {frozenset(by_digit[s * 300 : (s + 1) * 300]) for s in range(200)}
    parts = partition(ShardsPartition(kind="shards", labels_per_client=2), labels, 100, np.random.default_rng(0))
    assert len(parts) == 100 and {len(p) for p in parts} == {600}
    used: list[frozenset[int]] = []
    for part in parts:
        held = [shard for shard in reference if shard <= set(part.tolist())]
        assert len(held) == 2, f"a client holds {len(held)} whole shards, not 2"
        used += held
    assert set(used) == reference and len(used) == 200  # every shard dealt once
    assert max(len(np.unique(labels[p])) for p in parts) <= 4  # a shard can straddle two digits, at most
    assert np.mean([len(np.unique(labels[p])) for p in parts]) < 2.5  # most clients see two digits or one
