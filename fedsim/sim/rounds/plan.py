"""The round as one ordered list of stages, read off the config: what ``fedsim run CONFIG --plan`` prints
without training and what summary.json records as ``stages``.

The client side runs over each client's update row (K rows at a time on the fused executor), in this order:
an attacker rewrites its row, DP clips it, the uplink compressor encodes it (and DP clips what the server
decodes), local DP noises it, a per-client aggregation rule transforms what the server decodes, SecAgg+ masks
it, and the rank sums it (a gathering rule, or a server stage that reads rows, also keeps it). The server side
runs once a round on every rank, after the last client: omniscient attackers write their rows, the ranks' sums
are all-reduced, SecAgg+ unmasks, your stages before the rule run, the rule aggregates, DP releases the noised
mean, your stages after the release run, the algorithm's server step and the server optimiser (1-bit LAMB's
server half among them) move the model, LGD adopts its leaders, your stages
after the update run, the downlink compresses the broadcast, and SkewScout turns its knob. A test checks this
order against the calls a run makes (tests/sim/test_plan.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from fedsim.config import (
    AggregatorConfig,
    AlgorithmBase,
    AttackConfig,
    CompressorConfig,
    ControlConfig,
    CoresetConfig,
    ExecutorConfig,
    LrSchedule,
    PrivacyConfig,
    SecAggConfig,
    SelectionConfig,
    ServerOptimizerConfig,
    ServerStageConfig,
    TopologyConfig,
    local_training,
)
from fedsim.sim.server_stages import stage_names


class PlanSettings(Protocol):
    """What of a run's config the plan reads: the section of each stage a round can run."""

    @property
    def algorithm(self) -> AlgorithmBase: ...

    @property
    def decentralised(self) -> bool: ...

    @property
    def topology(self) -> TopologyConfig: ...

    @property
    def executor(self) -> ExecutorConfig: ...

    @property
    def coreset(self) -> CoresetConfig: ...

    @property
    def attack(self) -> AttackConfig: ...

    @property
    def privacy(self) -> PrivacyConfig: ...

    @property
    def uplink(self) -> CompressorConfig: ...

    @property
    def downlink(self) -> CompressorConfig: ...

    @property
    def aggregator(self) -> AggregatorConfig: ...

    @property
    def secagg(self) -> SecAggConfig: ...

    @property
    def selection(self) -> SelectionConfig: ...

    @property
    def cohort_size(self) -> int: ...

    @property
    def devices(self) -> int: ...

    @property
    def server_stages(self) -> Sequence[ServerStageConfig]: ...

    @property
    def server_optimizer(self) -> ServerOptimizerConfig: ...

    @property
    def control(self) -> ControlConfig: ...


@dataclass(frozen=True)
class PlannedStage:
    stage: str
    side: Literal["client", "server"]
    kind: str
    settings: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "side": self.side, **self.settings, "kind": self.kind}


def _without_kind(settings: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in settings.items() if k != "kind"}


def _own(cfg: PlanSettings, point: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Your own server stages at ``point``, each by its name (its kind, ``kind.2`` for a second one)."""
    named = zip(stage_names(cfg.server_stages), cfg.server_stages, strict=True)
    return [("server_stage", name, _without_kind(stage.settings())) for name, stage in named if stage.at == point]


def _private(cfg: PlanSettings, *fields: str) -> dict[str, Any]:
    return {f: getattr(cfg.privacy, f) for f in fields if getattr(cfg.privacy, f) is not None}


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
        client.append(("attack", attack.kind, _without_kind(attack.settings())))
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
        client.append(("dp_local_noise", privacy.kind, _private(cfg, "noise_multiplier", "target_epsilon")))
    if rule.per_client:
        client.append(("aggregator_transform", rule.kind, _without_kind(rule.settings())))
    if cfg.secagg.enabled:
        client.append(("secagg_mask", "secagg_plus", cfg.secagg.model_dump()))
    gathers = rule.gathers or any(stage.reads_rows for stage in cfg.server_stages)  # each row kept beside the sum
    weighting = "uniform" if privacy.enabled else opt.weighting  # under DP every client counts once
    client.append(("sum", "gather" if gathers else "weighted_sum", {"weighting": weighting}))

    server: list[tuple[str, str, dict[str, Any]]] = []
    first: list[PlannedStage] = []
    if not cfg.selection.samples_uniformly:  # the server chooses the cohort before the clients train
        select = {"cohort": cfg.cohort_size} | _without_kind(cfg.selection.settings())
        first.append(PlannedStage("select", "server", cfg.selection.kind, select))
    if attack.reads_honest:
        server.append(("attack_finish", attack.kind, {}))
    server.append(("all_reduce", "sum", {"devices": cfg.devices}))
    if cfg.secagg.enabled:
        server.append(("secagg_unmask", "secagg_plus", {}))
    server += _own(cfg, "before_rule")
    if rule.kind != "none":
        server.append(("aggregator", rule.kind, _without_kind(rule.settings())))
    if privacy.central:
        released = _private(cfg, "noise_multiplier", "target_epsilon", "max_epsilon", "noise_cohort", "population")
        server.append(
            ("dp_release", privacy.kind, released | {"delta": privacy.delta, "accountant": privacy.accountant})
        )
    server += _own(cfg, "after_release")
    server.append(("server_update", algorithm.kind, {}))
    if not type(algorithm).elects_leaders:  # the optimiser steps the model by the update the algorithm returns
        server_opt = _without_kind(cfg.server_optimizer.settings())
        if cfg.server_optimizer.schedule == LrSchedule():
            del server_opt["schedule"]
        server.append(("server_optimizer", cfg.server_optimizer.kind, server_opt))
    if type(algorithm).elects_leaders:
        server.append(("leaders", algorithm.kind, {}))
    server += _own(cfg, "after_update")
    if cfg.downlink.enabled:
        down = cfg.downlink.settings()
        server.append(("downlink", str(down.pop("kind")), down))
    if cfg.control.kind != "none":
        server.append(("control", cfg.control.kind, {"knob": knob.name if knob else None}))
    return [
        *first,
        *(PlannedStage(s, "client", k, v) for s, k, v in client),
        *(PlannedStage(s, "server", k, v) for s, k, v in server),
    ]


def describe(plan: list[PlannedStage]) -> str:
    """The plan as lines a person reads: each stage, its kind and settings."""
    lines = []
    for n, stage in enumerate(plan, 1):
        settings = ", ".join(f"{k}={v}" for k, v in stage.settings.items() if v not in (None, {}, []))
        lines.append(f"{n:2d}. [{stage.side}] {stage.stage}: {stage.kind}" + (f" ({settings})" if settings else ""))
    return "\n".join(lines)
