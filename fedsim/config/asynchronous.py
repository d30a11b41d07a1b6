"""Asynchronous federated learning on the trace clock (:class:`fedsim.config.clock.ClockConfig`): the server's
rule."""

from __future__ import annotations

from typing import Literal

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
