"""The round as one ordered list of stages, read off the config: what ``fedsim run CONFIG --plan`` prints
without training and what summary.json records as ``stages``.

The client side runs over each client's update row (K rows at a time on the fused executor), in this order:
an attacker rewrites its row, DP clips it, the uplink compressor encodes it (and DP clips what the server
decodes), local DP noises it, a per-client aggregation rule transforms what the server decodes, SecAgg+ masks
it, and the rank sums it (a gathering rule, or a server stage that reads rows, also keeps it). The server side
runs once a round on every rank, after the last client, as the registered server steps in the order their
declarations give (:mod:`fedsim.sim.rounds.steps`, one file each, which also say their own plan lines):
omniscient attackers write their rows, the ranks' sums are all-reduced (and the clients' records gathered, the
malicious ones' losses as ``attack.reported_loss`` says, a line that names who reads them), SecAgg+ unmasks,
your stages before the rule run, the rule aggregates, DP releases the noised mean, your stages after the
release run, the algorithm's server step and the server optimiser (1-bit LAMB's server half among them) move
the model, LGD adopts its leaders, your stages after the update run, the downlink compresses the broadcast,
and SkewScout turns its knob.
A test checks this order against the calls a run makes (tests/sim/test_plan.py).
"""

from __future__ import annotations

from typing import Any

from fedsim.config import local_training
from fedsim.sim.rounds.planned import PlannedStage, PlanSettings, private, without_kind
from fedsim.sim.rounds.steps import planned_server

__all__ = ["PlanSettings", "PlannedStage", "describe", "round_plan"]


def round_plan(cfg: PlanSettings) -> list[PlannedStage]:
    """The stages of one round of ``cfg``, in the order they run (a selector that is not a uniform sample first)."""
    algorithm, privacy, rule, attack = cfg.algorithm, cfg.privacy, cfg.aggregator, cfg.attack
    knob = cfg.control.knob
    if cfg.decentralised:  # every node trains, then mixes with its neighbours (or its leaders): no server
        mixing = {"topology": cfg.topology.kind} if cfg.topology.enabled else {}
        node: dict[str, Any] = {"optimizer": "sgd", "lr": algorithm.lr}  # one gradient a round, its own rule
        return [
            PlannedStage("train", "client", algorithm.kind, node),
            PlannedStage("mix", "client", algorithm.kind, mixing),
        ]
    opt = local_training(algorithm)  # a federated client's training
    uplink = cfg.uplink.settings() if cfg.uplink.enabled else None
    if uplink is None and knob is not None and knob.name == "topk":  # SkewScout's top-k knob alone
        uplink = {"kind": "topk"}
    client: list[tuple[str, str, dict[str, Any]]] = []
    if cfg.coreset.enabled:
        client.append(("coreset", cfg.coreset.kind, cfg.coreset.model_dump(exclude={"kind"})))
    local: dict[str, Any] = {
        "executor": cfg.executor.kind,
        "optimizer": opt.client_optimizer.kind,
        "lr": algorithm.lr,
    }
    local |= {"local_steps": opt.local_steps} if opt.local_steps else {"epochs": opt.local_epochs}
    client.append(("train", algorithm.kind, local))
    if attack.enabled:
        client.append(("attack", attack.kind, without_kind(attack.settings())))
    if privacy.enabled:
        audit = {"canaries": privacy.audit.canaries} if privacy.audit else {}
        client.append(
            ("dp_clip", privacy.kind, {"clip": privacy.clip, "adaptive": privacy.adaptive is not None} | audit)
        )
    if uplink is not None:
        kind = str(uplink.pop("kind"))
        client.append(("uplink", kind, uplink))
        if privacy.enabled:
            client.append(("dp_decoded_clip", privacy.kind, {"clip": privacy.clip}))
    if privacy.local:  # declared by the mechanism's settings class, never read off its name
        client.append(("dp_local_noise", privacy.kind, private(cfg, "noise_multiplier", "target_epsilon")))
    if rule.per_client:
        client.append(("aggregator_transform", rule.kind, without_kind(rule.settings())))
    if cfg.secagg.enabled:
        client.append(("secagg_mask", "secagg_plus", cfg.secagg.model_dump()))
    gathers = rule.gathers or any(stage.reads_rows for stage in cfg.server_stages)  # each row kept beside the sum
    weighting = "uniform" if privacy.enabled else opt.weighting  # under DP every client counts once
    client.append(("sum", "gather" if gathers else "weighted_sum", {"weighting": weighting}))

    first: list[PlannedStage] = []
    if not cfg.selection.samples_uniformly:  # the server chooses the cohort before the clients train
        select = {"cohort": cfg.cohort_size} | without_kind(cfg.selection.settings())
        if cfg.selection.reads_clients and attack.lies_about_loss:  # it chooses by what the attackers say
            select["reads_lies"] = f"attack.reported_loss={attack.reported_loss}"
        first.append(PlannedStage("select", "server", cfg.selection.kind, select))
    return [
        *first,
        *(PlannedStage(s, "client", k, v) for s, k, v in client),
        *planned_server(cfg),  # the server's steps, each its own file (fedsim.sim.rounds.steps)
    ]


def describe(plan: list[PlannedStage]) -> str:
    """The plan as lines a person reads: each stage, its kind and settings."""
    lines = []
    for n, stage in enumerate(plan, 1):
        settings = ", ".join(f"{k}={v}" for k, v in stage.settings.items() if v not in (None, {}, []))
        lines.append(f"{n:2d}. [{stage.side}] {stage.stage}: {stage.kind}" + (f" ({settings})" if settings else ""))
    return "\n".join(lines)
