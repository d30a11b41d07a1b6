"""Cohort sampling: a pure function of (seed, round), uniform, and its cost set by the cohort."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from scipy.stats import chi2

from fedsim.sim.rounds.cohort import reachable, sample_cohort


def direct(seed: int, round_idx: int, population: int, size: int) -> list[int]:
    """The definition without availability written out: ``size`` of the population as an array."""
    rng = np.random.default_rng([seed, round_idx])
    pool = np.arange(population)
    if size >= len(pool):
        return [int(c) for c in pool]
    return sorted(int(c) for c in rng.choice(pool, size=size, replace=False))


@pytest.mark.parametrize("population", [7, 1000, 20_000, 1_000_000])
def test_without_availability_the_cohort_is_the_definitions_for_every_seed_round_and_size(population: int) -> None:
    for seed in range(3):
        for round_idx in range(3):
            for size in (1, 5, 100, 5000):
                assert sample_cohort(seed, round_idx, population, size) == direct(seed, round_idx, population, size)


@pytest.mark.parametrize("population", [7, 60, 1000, 20_000, 1_000_000])
def test_with_availability_the_cohort_is_reachable_distinct_sorted_and_as_large_as_it_can_be(population: int) -> None:
    for seed in range(3):
        for round_idx in range(3):
            for size in (1, 5, 100):
                got = sample_cohort(seed, round_idx, population, size, 0.3)
                assert got == sample_cohort(seed, round_idx, population, size, 0.3)  # deterministic
                assert got == sorted(set(got)) and all(0 <= c < population for c in got)
                assert reachable(seed, round_idx, np.array(got, dtype=np.int64), 0.3).all()
                if population <= 1000:  # small enough to count every reachable client
                    n_reachable = int(reachable(seed, round_idx, np.arange(population), 0.3).sum())
                    assert len(got) == min(size, n_reachable)
                else:
                    assert len(got) == size


def test_each_client_is_reachable_with_the_availability_independently_of_seed_and_round() -> None:
    ids = np.arange(200_000)
    rates = [reachable(seed, r, ids, 0.3).mean() for seed in range(3) for r in range(3)]
    assert all(abs(rate - 0.3) < 0.005 for rate in rates)
    a, b = reachable(0, 0, ids, 0.3), reachable(0, 1, ids, 0.3)
    assert abs((a & b).mean() - 0.09) < 0.005  # rounds draw independently


@pytest.mark.parametrize(
    ("population", "size", "availability"),
    # Floyd's; the lazy draw; the permutation; the lazy draw at a larger scale; the lazy draw that often passes
    # half the population (1 in 20 reachable) and completes its order with a permutation
    [(40, 3, 1.0), (40, 3, 0.5), (40, 12, 0.5), (500, 10, 0.2), (100, 1, 0.05)],
)
def test_every_client_is_equally_likely_to_be_drawn(population: int, size: int, availability: float) -> None:
    counts = np.zeros(population)
    for round_idx in range(6000):
        cohort = sample_cohort(11, round_idx, population, size, availability)
        counts[cohort] += 1
        assert len(cohort) == min(size, int(reachable(11, round_idx, np.arange(population), availability).sum()))
    expected = counts.sum() / population
    statistic = float(((counts - expected) ** 2 / expected).sum())
    assert statistic < chi2.ppf(0.999, population - 1), statistic


@pytest.mark.parametrize("availability", [1.0, 0.3])
def test_a_cohort_of_100_from_15_million_clients_allocates_nothing_population_sized(availability: float) -> None:
    sample_cohort(0, 0, 1000, 10, availability)  # first-call set-up outside the measurement
    tracemalloc.start()
    try:
        cohort = sample_cohort(0, 3, 15_000_000, 100, availability)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(cohort) == 100 and max(cohort) < 15_000_000
    assert peak < 1 << 20  # np.arange(15M) alone is 120 MB; one random number per client another 120 MB
