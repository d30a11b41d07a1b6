"""Each topology's mixing matrix is doubly stochastic and is the graph its name says."""

from __future__ import annotations

import math

import pytest
import torch

from fedsim.config import ConfigError, TopologyConfig
from fedsim.decentralised.topology import Topology

KINDS = ["ring", "torus", "exponential", "random_regular", "complete"]


def _w(kind: str, n: int, **settings: object) -> torch.Tensor:
    return Topology.build(TopologyConfig.model_validate({"kind": kind, **settings}), n).dense()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n", [6, 12, 16])
def test_every_mixing_matrix_is_doubly_stochastic(kind: str, n: int) -> None:
    w = _w(kind, n)
    ones = torch.ones(n, dtype=torch.float64)
    torch.testing.assert_close(w.sum(1), ones)
    torch.testing.assert_close(w.sum(0), ones)
    assert (w >= 0).all()
    if kind != "exponential":  # the undirected graphs' Metropolis weights are symmetric
        torch.testing.assert_close(w, w.T)


def test_ring_torus_and_complete_are_their_graphs() -> None:
    ring = _w("ring", 8)
    for i in range(8):
        assert {j for j in range(8) if ring[i, j] > 0} == {i, (i - 1) % 8, (i + 1) % 8}
        assert ring[i, i] == pytest.approx(1 / 3)
    torus = _w("torus", 12, rows=3)  # 3 x 4, wrapped
    node = 5  # row 1, column 1
    assert {j for j in range(12) if torus[node, j] > 0} == {5, 1, 9, 4, 6}
    assert torus[node, 1] == pytest.approx(1 / 5)
    torch.testing.assert_close(_w("complete", 5), torch.full((5, 5), 0.2, dtype=torch.float64))


def test_exponential_graph_hears_from_powers_of_two_hops() -> None:
    n = 16
    w = _w("exponential", n)
    for i in range(n):
        heard = {j for j in range(n) if w[i, j] > 0}
        assert heard == {i} | {(i - 2**k) % n for k in range(4)}
        assert w[i, i] == pytest.approx(1 / 5)
    assert math.ceil(math.log2(12)) + 1 == int((_w("exponential", 12)[0] > 0).sum())


def test_random_regular_graph_has_the_degree_and_its_seed() -> None:
    w = _w("random_regular", 20, degree=3, seed=1)
    degrees = ((w > 0).sum(1) - 1).tolist()
    assert degrees == [3] * 20
    assert not torch.equal(w, _w("random_regular", 20, degree=3, seed=2))
    torch.testing.assert_close(w, _w("random_regular", 20, degree=3, seed=1))


def test_mix_is_the_matrix_row_times_the_messages() -> None:
    topology = Topology.build(TopologyConfig(kind="exponential"), 8)
    messages = torch.randn(8, 5, dtype=torch.float64)
    mixed = torch.stack([topology.mix(i, lambda j: messages[j]) for i in range(8)])
    torch.testing.assert_close(mixed, topology.dense() @ messages)


@pytest.mark.parametrize(
    ("settings", "n", "words"),
    [
        ({"kind": "torus", "rows": 5}, 12, "topology.rows=5 does not divide the 12 nodes"),
        ({"kind": "random_regular", "degree": 3}, 7, "degree x nodes even"),
        ({"kind": "random_regular", "degree": 8}, 8, "needs degree < 8"),
    ],
)
def test_a_graph_that_cannot_be_built_is_one_line(settings: dict[str, object], n: int, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        Topology.build(TopologyConfig.model_validate(settings), n)


def test_the_undirected_exponential_graph_hears_both_ways() -> None:
    w = _w("exponential", 16, directed=False)
    torch.testing.assert_close(w, w.T)
    torch.testing.assert_close(w.sum(0), torch.ones(16, dtype=torch.float64))
    assert {j for j in range(16) if w[0, j] > 0} == {0, 1, 15, 2, 14, 4, 12, 8}
    assert w[0, 1] == pytest.approx(1 / 8)
