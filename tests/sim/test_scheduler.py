"""Runtime model and LPT assignment on scripted timings."""

from __future__ import annotations

import pytest

from fedsim.sim.runtime.runtime_model import RuntimeModel
from fedsim.sim.runtime.scheduler import assign, declared, even_split, lpt


def _fitted(slowdown: list[float], overhead: float = 0.01, per_sample: float = 0.001) -> RuntimeModel:
    model = RuntimeModel(len(slowdown), window=50, warmup=4)
    for d, f in enumerate(slowdown):
        for n in (10, 20, 40, 80, 160):
            model.observe(d, n, f * (overhead + per_sample * n))
    return model


def test_least_squares_recovers_each_device_speed() -> None:
    model = _fitted([1.0, 4.0])
    assert model.coefficients(0) == pytest.approx((0.01, 0.001))
    assert model.coefficients(1) == pytest.approx((0.04, 0.004))
    assert model.predict(1, 100) == pytest.approx(0.44)


def test_learned_splits_evenly_during_warmup_then_follows_the_measured_speeds() -> None:
    cold = RuntimeModel(2, warmup=4)
    plan, _ = assign("learned", list(range(6)), dict.fromkeys(range(6), 10), cold)
    assert plan == [[0, 1, 2], [3, 4, 5]]
    warm = _fitted([1.0, 3.0])
    plan, predicted = assign("learned", list(range(8)), {c: 50 for c in range(8)}, warm)
    assert [len(p) for p in plan] == [6, 2]  # the 3x slower device gets a quarter of equal clients
    assert max(predicted) == pytest.approx(6 * 0.06)


def test_lpt_is_near_ideal_on_uneven_clients() -> None:
    slowdown = [1.0, 1.0, 2.0, 4.0]
    model = _fitted(slowdown, overhead=0.0)
    sizes = {c: 5 + (c * 37) % 200 for c in range(200)}
    plan, predicted = lpt(list(sizes), sizes, model.predict, 4)
    ideal = sum(sizes.values()) * 0.001 / sum(1 / f for f in slowdown)
    assert max(predicted) <= 1.02 * ideal
    even = even_split(list(sizes), 4)
    even_makespan = max(sum(sizes[c] for c in p) * 0.001 * f for p, f in zip(even, slowdown, strict=True))
    assert even_makespan / max(predicted) > 2.0
    assert sorted(c for p in plan for c in p) == list(range(200)) and all(p == sorted(p) for p in plan)


def test_state_affinity_breaks_ties() -> None:
    model = _fitted([1.0, 1.0])
    plan, _ = lpt([7], {7: 10}, model.predict, 2, owner={7: 1})
    assert plan == [[], [7]]
    plan, _ = lpt([7], {7: 10}, model.predict, 2, owner={})
    assert plan == [[7], []]


def test_the_default_lpt_plans_on_declared_speeds_whatever_the_measured_seconds() -> None:
    """Worked by hand: sizes 40, 30, 20, 10 on devices of slow-down 1 and 2. 40 -> d0 (40 against 80); 30 -> d1
    (70 against 60); 20 -> d0 (60 against 100); 10 -> d0 (70 against 80). Whatever the runtime model measured
    (here a device 0 that looks 10x slower), the plan is the same: a function of sizes and declared speeds."""
    sizes = {1: 40, 2: 30, 3: 20, 4: 10}
    for measured in ([1.0, 1.0], [10.0, 1.0]):
        plan, _ = assign("lpt", list(sizes), sizes, _fitted(measured), slowdown=(1.0, 2.0))
        assert plan == [[1, 3, 4], [2]]
    assert lpt(list(sizes), sizes, declared((1.0, 2.0)), 2)[1] == [70.0, 60.0]
    plan, _ = assign("lpt", list(sizes), sizes, RuntimeModel(2, warmup=4))  # no speeds declared: all equal
    assert plan == [[1, 4], [2, 3]]
