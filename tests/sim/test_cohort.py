"""Cohort sampling: a pure function of (seed, round), and without availability its cost set by the cohort."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from fedsim.sim.cohort import sample_cohort


def direct(seed: int, round_idx: int, population: int, size: int, availability: float) -> list[int]:
    """The definition written out: the population as an array, the reachable ones, ``size`` of them."""
    rng = np.random.default_rng([seed, round_idx])
    pool = np.arange(population)
    if availability < 1.0:
        pool = pool[rng.random(population) < availability]
    if size >= len(pool):
        return [int(c) for c in pool]
    return sorted(int(c) for c in rng.choice(pool, size=size, replace=False))


@pytest.mark.parametrize("population", [7, 1000, 20_000, 1_000_000])
@pytest.mark.parametrize("availability", [1.0, 0.3])
def test_the_cohort_is_the_definitions_for_every_seed_round_and_size(population: int, availability: float) -> None:
    for seed in range(3):
        for round_idx in range(3):
            for size in (1, 5, 100, 5000):
                got = sample_cohort(seed, round_idx, population, size, availability)
                assert got == direct(seed, round_idx, population, size, availability)
                assert got == sorted(set(got)) and len(got) <= size


def test_a_cohort_of_100_from_15_million_clients_allocates_nothing_population_sized() -> None:
    tracemalloc.start()
    try:
        cohort = sample_cohort(0, 3, 15_000_000, 100)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(cohort) == 100 and max(cohort) < 15_000_000
    assert peak < 1 << 20  # np.arange(15M) alone is 120 MB
