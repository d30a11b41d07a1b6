"""``fedsim run CONFIG --plan``: what a run will do, worked out without training it or writing anything.

The command builds the engine as the run would build it (its data, model, executor, threads, DP calibration)
and never begins it: building writes nothing (the run store, the output directory and the state store are first
touched when the run begins), so the plan can say what the run itself would pick.
"""

from __future__ import annotations

from pathlib import Path

from fedsim.decentralised.gossip import GossipEngine
from fedsim.privacy.secagg_plan import tolerance
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.plan import describe, round_plan


def plan_report(engine: Engine | GossipEngine, out: Path, db: Path, built_s: float) -> str:
    """The plan of a built, never begun ``engine`` as lines a person reads: population and cohort, executor and
    threads, the round's stages, DP's noise and the epsilon the run will spend, SecAgg+'s dropout tolerance;
    ``built_s`` is how long building it took."""
    cfg = engine.cfg
    federated = engine if isinstance(engine, Engine) else None  # a decentralised run has no executor or DP
    data = cfg.data
    lines = [f"run {cfg.name}: {cfg.rounds} rounds, seed {cfg.seed}; would write {out} and the run store {db}"]
    population = f"population: {engine.dataset.num_clients:,} clients ({data.dataset}"
    lines.append(population + (f", {data.partition.kind} partition)" if hasattr(data, "partition") else ")"))
    if federated is None:
        lines.append(f"decentralised: every node trains each round ({cfg.topology.kind} topology)")
    elif federated.cfg.asynchronous.enabled:
        a = federated.cfg.asynchronous
        lines.append(f"asynchronous: {a.kind}, {a.concurrency} clients in flight, a server step every {a.buffer}")
    else:
        lines.append(f"cohort: {cfg.cohort_size:,} clients a round ({federated.cfg.sampling} sampling)")
    if federated is not None and cfg.clock.kind == "trace":
        trace, clock = federated.trace, cfg.clock
        line = f"clock: the trace's ({trace.clients:,} devices, {trace.meta.get('source', 'file')})"
        if not federated.cfg.asynchronous.enabled:
            deadline = f"at {clock.deadline_s:g} s or " if clock.deadline_s else ""
            line += f"; {cfg.cohort_size + clock.over_select:,} start a round, which ends {deadline}when"
            line += f" {cfg.cohort_size:,} have reported"
        lines.append(line)
    kind = engine.executor_kind
    asked = "" if cfg.executor.kind == kind else f" (executor.kind={cfg.executor.kind} picked it)"
    lines.append(f"executor: {kind}{asked} on {cfg.devices} device(s), accelerator {engine.accelerator.device}")
    if engine.threads_note:
        lines.append(engine.threads_note)
    lines.append("each round:")
    lines.append(describe(round_plan(cfg)))
    privacy = federated.privacy if federated is not None else None
    if privacy is not None:
        lines.append(privacy.describe())
        run_eps = privacy.epsilon(cfg.rounds)
        spend = f"epsilon after {cfg.rounds} rounds: {run_eps:.4g} at delta={privacy.run_accounting.delta:g}"
        spend += (
            f" ({privacy.run_accounting.neighbours} neighbours, sensitivity {privacy.run_accounting.sensitivity:g}C)"
        )
        if privacy.deployment_epsilon is not None:
            spend += f"; deployment_epsilon {privacy.deployment_epsilon(cfg.rounds):.4g}"
        if cfg.privacy.max_epsilon is not None and not privacy.allows(cfg.rounds):
            last = next(r for r in range(cfg.rounds, 0, -1) if privacy.allows(r))
            spend += f"; privacy.max_epsilon={cfg.privacy.max_epsilon:g} stops it after {last} rounds"
        lines.append(spend)
    if cfg.secagg.enabled:
        lines.append(tolerance(cfg.cohort_size, cfg.secagg.num_shares, cfg.secagg.reconstruction_threshold))
    lines.append(f"worked out in {built_s:.1f} s; nothing trained, nothing written")
    return "\n".join(lines)
