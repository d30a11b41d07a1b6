"""Asynchronous federated learning on the trace clock (:class:`fedsim.config.clock.ClockConfig`): the server's
rule."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from fedsim.config.base import Strict

SYNC_MOVED = (
    "asynchronous.kind=sync is a synchronous run on the trace clock now: clock.kind: trace, with clients_per_round"
    " (the old buffer) and clock.over_select (concurrency - buffer)"
)


class AsyncConfig(Strict):
    """``kind: fedbuff`` (Nguyen et al. 2022) or ``fedasync`` (Xie et al. 2019) runs the asynchronous server on
    the trace clock (``clock``): ``concurrency`` clients in flight, each update weighted by ``staleness``
    (``polynomial``: (1 + s)^-a; ``hinge``: 1 up to b, then 1 / (a (s - b) + 1); ``constant``); FedBuff steps the
    server once per ``buffer`` arrivals through the algorithm's server update, FedAsync mixes each local model
    in at ``alpha`` times its weight. A run's ``rounds`` count server steps. The synchronous baseline on the same
    clock is a synchronous run with ``clock.kind: trace``."""

    kind: Literal["none", "fedbuff", "fedasync"] = Field(
        "none", description="fedbuff, fedasync, or none: synchronous rounds"
    )
    concurrency: int = Field(100, ge=1, le=1_000_000, description="clients training at once")
    buffer: int = Field(10, ge=1, le=1_000_000, description="FedBuff's K: arrivals per server step")
    staleness: Literal["constant", "polynomial", "hinge"] = Field(
        "polynomial", description="how an update is weighted by its staleness s: constant, polynomial or hinge"
    )
    staleness_a: float = Field(0.5, ge=0, le=100, description="the staleness rule's a")
    staleness_b: float = Field(4.0, ge=0, le=1e9, description="hinge: the staleness up to which updates weigh 1")
    alpha: float = Field(0.6, gt=0, le=1, description="FedAsync's mixing weight")

    @field_validator("kind", mode="before")
    @classmethod
    def _not_sync(cls, kind: object) -> object:
        if kind == "sync":
            raise ValueError(SYNC_MOVED)
        return kind

    @property
    def enabled(self) -> bool:
        return self.kind != "none"


def asynchronous_refusal(run: Any) -> str | None:
    """What the asynchronous server in ``run`` (a RunConfig) does not define or account for, one line with the
    section and the reason; None when it runs. FedBuff steps with a sum of ``buffer`` arrivals, so the stages
    over a round's sum compose with it (compressors, attacks that rewrite their own update, a rule over the
    buffer's rows, central DP on its sum); FedAsync mixes each arrival in alone, with no sum for a stage to act
    on."""
    mode = run.asynchronous.kind
    buffered = mode == "fedbuff"
    alone = f"asynchronous.kind={mode} mixes each arrival into the model alone, with no sum for it to act on"
    privacy, attack = run.privacy, run.attack
    refused: dict[str, tuple[bool, str]] = {
        "uplink": (run.uplink.enabled and not buffered, alone),
        "aggregator": (run.aggregator.enabled and not buffered, alone),
        "attack": (attack.enabled and not buffered, alone),
        "privacy": (privacy.enabled and not buffered, alone),
        "downlink": (run.downlink.enabled, "a client downloads the model as it is when it starts, not a broadcast"),
        "secagg": (run.secagg.enabled, "SecAgg+ over the buffer's arrivals is not built yet"),
        "control": (run.control.enabled, "SkewScout probes and retunes synchronous rounds"),
        "server_stages": (bool(run.server_stages), "a server stage runs at named points of a synchronous round"),
        "coreset": (run.coreset.enabled, "a client's coreset is chosen for a synchronous round"),
        "federated_eval": (run.federated_eval.enabled, "it scores a synchronous round's cohort"),
        "emulation": (
            run.emulation.availability < 1 or run.emulation.dropout > 0 or bool(run.emulation.slowdown),
            "the trace says who is online and how fast",
        ),
    }
    for section, (used, why) in refused.items():
        if used:
            return f"{section}: not supported with asynchronous.kind={mode} ({why})"
    if attack.enabled and attack.reads_honest:
        return (
            f"attack.kind={attack.kind} reads a round's honest updates, and asynchronous.kind={mode}'s arrive one"
            " by one; use an attack that rewrites its own update"
        )
    if privacy.enabled:  # what the buffered accounting (fedsim.privacy.dp) states, and nothing beyond it
        beyond = {
            "kind": (privacy.local, f"privacy.kind={privacy.kind} noises each message locally"),
            "adaptive": (privacy.adaptive is not None, "its noised count is a round's"),
            "audit": (privacy.audit is not None, "its canaries are sampled into rounds"),
            "noise_cohort": (privacy.noise_cohort is not None, "the buffer is the noise's cohort"),
            "population": (privacy.population is not None, "no sampling amplifies it, so no population does"),
        }
        for field, (used, why) in beyond.items():
            if used:
                return f"privacy.{field}: asynchronous.kind={mode} accounts central DP on the buffer's sum only ({why})"
    return None
