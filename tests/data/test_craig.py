"""CRAIG's greedy facility location against the paper's definition evaluated from scratch."""

from __future__ import annotations

import numpy as np
import torch

from fedsim.data.craig import craig, facility_location


def _greedy_by_definition(g: np.ndarray, k: int) -> tuple[list[int], list[int]]:
    """Algorithm 1 of the paper, literally: add the j maximising F(S + j), F(S) = sum_i max_{j in S} s_ij."""
    d = np.linalg.norm(g[:, None, :] - g[None, :, :], axis=2)
    s = d.max() - d
    chosen: list[int] = []

    def f(subset: list[int]) -> float:
        return float(s[:, subset].max(axis=1).sum()) if subset else 0.0

    for _ in range(k):
        gains = [(f([*chosen, j]) - f(chosen), -j) for j in range(len(g)) if j not in chosen]
        chosen.append(-max(gains)[1])
    nearest = s[:, chosen].argmax(axis=1)
    return chosen, [int((nearest == c).sum()) for c in range(k)]


def test_the_greedy_matches_the_papers_definition_and_weights_count_what_each_stands_for() -> None:
    g = np.random.default_rng(0).normal(size=(40, 6))
    chosen, weights = _greedy_by_definition(g, 7)
    index, weight = facility_location(torch.from_numpy(g), 7)
    assert index.tolist() == chosen
    assert weight.tolist() == weights and sum(weights) == 40


def test_a_subset_per_class_of_the_right_size() -> None:
    rng = np.random.default_rng(1)
    labels = torch.from_numpy(rng.integers(0, 3, size=90))
    features = torch.from_numpy(rng.normal(size=(90, 4)))
    index, weight = craig(features, labels, 0.3)
    for c in range(3):
        members = int((labels == c).sum())
        picked = labels[index] == c
        assert int(picked.sum()) == -(-3 * members // 10)  # ceil(0.3 n_c)
        assert int(weight[picked].sum()) == members  # each class's samples are all stood for
    assert index.tolist() == sorted(set(index.tolist()))


def test_clustered_data_picks_one_sample_per_cluster() -> None:
    centres = torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    points = torch.cat([c + 0.1 * torch.randn(20, 2, generator=torch.Generator().manual_seed(2)) for c in centres])
    index, weight = facility_location(points, 3)
    assert sorted((index // 20).tolist()) == [0, 1, 2] and weight.tolist() == [20.0, 20.0, 20.0]
