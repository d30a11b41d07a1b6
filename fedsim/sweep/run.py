"""A sweep from plan to finished runs: throughputs per device type, the policy's placement, then every run trained
for real, round by round in the order the placement gives (virtual time: the pool is emulated, the training is
not), each into the run store. ``sweep.json`` records the plan and each run's virtual start and finish."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedsim.config.sweep import SweepConfig
from fedsim.sweep.gavel import max_min_fairness, min_makespan
from fedsim.sweep.grid import SweepRun
from fedsim.sweep.schedule import Schedule, lpt, round_based


@dataclass(frozen=True)
class Plan:
    types: list[str]
    throughputs: np.ndarray  # (runs, types): rounds per virtual second
    steps: np.ndarray  # rounds each run trains
    shares: np.ndarray | None  # Gavel's allocation X; None under LPT
    schedule: Schedule


def throughputs(cfg: SweepConfig, runs: list[SweepRun], host_s: list[float]) -> np.ndarray:
    """Rounds per second of each run on each device type: this host's rate times the type's speed factor for
    the run's model kind."""
    types = list(cfg.types)
    rows = [[cfg.factor(run.cfg.model.kind, t) / s for t in types] for run, s in zip(runs, host_s, strict=True)]
    return np.array(rows)


def plan(cfg: SweepConfig, runs: list[SweepRun], host_s: list[float]) -> Plan:
    t = throughputs(cfg, runs, host_s)
    steps = np.array([run.cfg.rounds for run in runs], dtype=float)
    counts = np.array(list(cfg.types.values()))
    if cfg.policy == "lpt":
        lengths = steps * np.array(host_s)  # each run's seconds on this host: what an agnostic scheduler sees
        return Plan(list(cfg.types), t, steps, None, lpt(t, steps, counts, lengths))
    allocation = min_makespan(t, counts, steps) if cfg.policy == "min_makespan" else max_min_fairness(t, counts)
    schedule = round_based(t, steps, counts, allocation.shares, cfg.round_s)
    return Plan(list(cfg.types), t, steps, allocation.shares, schedule)


def execute(plan: Plan, runs: list[SweepRun], out: Path, db: Path) -> list[dict[str, Any]]:
    """Train every run to the end, advancing each as the schedule does: under Gavel's rounds, each scheduling
    round trains its placed runs up to the whole rounds they have completed by its end; under LPT, each run in
    turn. Returns each run's record for ``sweep.json``."""
    from fedsim.api.launch import build_engine

    engines: dict[int, Any] = {}
    summaries: dict[int, Any] = {}

    def advance(m: int, target: int) -> None:
        if m in summaries:
            return
        if m not in engines:
            engines[m] = build_engine(runs[m].cfg, out / runs[m].cfg.name, db, resume=False)
        engine = engines[m]
        if target >= runs[m].cfg.rounds:
            summaries[m] = engine.run()  # its last rounds, summary.json, the run store's "finished"
            return
        while engine.next_round < target:
            engine.run_round(engine.next_round)

    schedule = plan.schedule
    try:
        if plan.shares is None:
            for m, _ in schedule.placements[0]:
                advance(m, runs[m].cfg.rounds)
        else:
            for placed, done in zip(schedule.placements, schedule.progress, strict=True):
                for m, _ in placed:
                    advance(m, math.floor(done[m] + 1e-6))
    finally:
        for m, engine in engines.items():
            if m not in summaries:
                engine.close()
    records = []
    for m, run in enumerate(runs):
        on = [plan.types[schedule.devices[d]] for placed in schedule.placements for k, d in placed if k == m]
        summary = summaries[m]
        records.append(
            {
                "name": run.cfg.name,
                "grid": run.label,
                "run_id": summary.run_id,
                "rounds": run.cfg.rounds,
                "final_accuracy": summary.final_accuracy,
                "start_s": float(schedule.start_s[m]),
                "finish_s": float(schedule.finish_s[m]),
                "placements": {t: on.count(t) for t in plan.types if t in on},
                "rounds_per_s": {t: float(v) for t, v in zip(plan.types, plan.throughputs[m], strict=True)},
            }
        )
    return records


def report(cfg: SweepConfig, plan: Plan, host_s: list[float], records: list[dict[str, Any]]) -> dict[str, Any]:
    """``sweep.json``: the policy, the pool, the makespan and mean completion time, and each run."""
    return {
        "name": cfg.name,
        "policy": cfg.policy,
        "types": cfg.types,
        "round_s": cfg.round_s,
        "makespan_s": plan.schedule.makespan_s,
        "mean_completion_s": plan.schedule.mean_completion_s,
        "scheduling_rounds": len(plan.schedule.placements) if plan.shares is not None else None,
        "host_round_s": host_s,
        "shares": None if plan.shares is None else plan.shares.round(6).tolist(),
        "runs": records,
    }


def write_report(path: Path, fields: dict[str, Any]) -> None:
    from fedsim.sim.rounds.summary import strict

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(strict(fields), indent=2, allow_nan=False) + "\n")
