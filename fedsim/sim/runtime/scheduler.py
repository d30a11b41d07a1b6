"""Assigning a round's clients to devices so that no device straggles.

Longest-processing-time first (Graham 1969) on predicted seconds: clients in decreasing predicted time, each
onto the device that would finish it earliest; ties go to the device that already holds the client's state
(no hand-off), then to the lowest index. Within a device, clients train in id order so that the sum order is
fixed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fedsim.sim.runtime.runtime_model import RuntimeModel

Plan = list[list[int]]


def even_split(cohort: Sequence[int], devices: int) -> Plan:
    """The same number of clients per device (give or take one), in cohort order."""
    plan: Plan = [[] for _ in range(devices)]
    for i, cid in enumerate(cohort):
        plan[i * devices // max(len(cohort), 1)].append(cid)
    return plan


def lpt(
    cohort: Sequence[int],
    samples: Mapping[int, int],
    model: RuntimeModel,
    owner: Mapping[int, int] | None = None,
) -> tuple[Plan, list[float]]:
    """LPT assignment and each device's predicted seconds; ``owner[cid]`` is where its state lives."""
    owner = owner or {}
    devices = model.devices
    finish = [0.0] * devices
    plan: Plan = [[] for _ in range(devices)]
    by_size = sorted(cohort, key=lambda c: (-samples[c], c))
    for cid in by_size:
        costs = [finish[d] + model.predict(d, samples[cid]) for d in range(devices)]
        best = min(costs)
        home = owner.get(cid, -1)
        at_home = 0 <= home < devices and costs[home] <= best + 1e-9 * max(best, 1.0)
        d = home if at_home else costs.index(best)
        plan[d].append(cid)
        finish[d] = costs[d]
    return [sorted(p) for p in plan], finish


def predicted_seconds(plan: Plan, samples: Mapping[int, int], model: RuntimeModel) -> list[float]:
    """Predicted busy seconds of every device under ``plan``."""
    return [sum(model.predict(d, samples[c]) for c in clients) for d, clients in enumerate(plan)]


def assign(
    kind: str,
    cohort: Sequence[int],
    samples: Mapping[int, int],
    model: RuntimeModel,
    owner: Mapping[int, int] | None = None,
) -> tuple[Plan, list[float]]:
    """The plan for one round: ``even`` always, ``lpt`` once the runtime model is warm."""
    if kind == "lpt" and model.warm:
        return lpt(cohort, samples, model, owner)
    plan = even_split(cohort, model.devices)
    return plan, predicted_seconds(plan, samples, model)
