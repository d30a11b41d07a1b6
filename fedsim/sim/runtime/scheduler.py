"""Assigning a round's clients to devices so that no device straggles.

Longest-processing-time first (Graham 1969): clients in decreasing predicted cost, each onto the device that would
finish it earliest; ties go to the device that already holds the client's state (no hand-off), then to the lowest
index. Within a device, clients train in id order so that the sum order is fixed.

Two cost models. ``lpt`` (the default) costs a client its samples times its device's declared slow-down
(``emulation.slowdown``, 1 each when unset): a function of the cohort, its sizes, the configuration and where
each state lives, so two runs of one configuration, and a resumed run, assign every client alike and sum each
round in the same order. ``learned`` is Parrot's: seconds predicted by each device's runtime model, fitted on
the seconds it measured; it follows the machine's timing noise, so two runs may train a client on different
ranks (weights then differ in float order, state hand-offs in count).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from fedsim.sim.runtime.runtime_model import RuntimeModel

Plan = list[list[int]]
Cost = Callable[[int, int], float]  # (device, samples) -> predicted cost


def even_split(cohort: Sequence[int], devices: int) -> Plan:
    """The same number of clients per device (give or take one), in cohort order."""
    plan: Plan = [[] for _ in range(devices)]
    for i, cid in enumerate(cohort):
        plan[i * devices // max(len(cohort), 1)].append(cid)
    return plan


def lpt(
    cohort: Sequence[int],
    samples: Mapping[int, int],
    cost: Cost,
    devices: int,
    owner: Mapping[int, int] | None = None,
) -> tuple[Plan, list[float]]:
    """LPT assignment and each device's predicted cost; ``owner[cid]`` is where its state lives."""
    owner = owner or {}
    finish = [0.0] * devices
    plan: Plan = [[] for _ in range(devices)]
    by_size = sorted(cohort, key=lambda c: (-samples[c], c))
    for cid in by_size:
        costs = [finish[d] + cost(d, samples[cid]) for d in range(devices)]
        best = min(costs)
        home = owner.get(cid, -1)
        at_home = 0 <= home < devices and costs[home] <= best + 1e-9 * max(best, 1.0)
        d = home if at_home else costs.index(best)
        plan[d].append(cid)
        finish[d] = costs[d]
    return [sorted(p) for p in plan], finish


def declared(slowdown: Sequence[float]) -> Cost:
    """The ``lpt`` cost: a client's samples times its device's declared slow-down."""
    return lambda device, n: slowdown[device] * n


def predicted_seconds(plan: Plan, samples: Mapping[int, int], model: RuntimeModel) -> list[float]:
    """Seconds the runtime model predicts for every device under ``plan``."""
    return [sum(model.predict(d, samples[c]) for c in clients) for d, clients in enumerate(plan)]


def assign(
    kind: str,
    cohort: Sequence[int],
    samples: Mapping[int, int],
    model: RuntimeModel,
    owner: Mapping[int, int] | None = None,
    slowdown: Sequence[float] | None = None,
) -> tuple[Plan, list[float]]:
    """The plan for one round and each device's seconds as the runtime model predicts them: ``even`` always;
    ``lpt`` on declared speeds (``slowdown``, 1 each when None); ``learned`` once the runtime model is warm
    (an even split before)."""
    if kind == "learned" and model.warm:
        return lpt(cohort, samples, model.predict, model.devices, owner)
    if kind == "lpt":
        plan, _ = lpt(cohort, samples, declared(slowdown or (1.0,) * model.devices), model.devices, owner)
    else:
        plan = even_split(cohort, model.devices)
    return plan, predicted_seconds(plan, samples, model)
