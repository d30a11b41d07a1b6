"""Asynchronous federated learning on the virtual clock: the population trace and the server's rule."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from fedsim.config.base import Strict


class SyntheticTraceConfig(Strict):
    """A generated population (fedsim.traces.synthetic): ``clients`` device profiles (run clients map onto
    them by id modulo), log-normal speeds and links, nightly windows across time zones."""

    clients: int = Field(1000, ge=1, le=10_000_000)
    seed: int | None = Field(None, ge=0, description="default: the run's seed")
    compute_s_median: float = Field(0.005, gt=0, description="seconds to train on one sample, median device")
    compute_sigma: float = Field(0.6, ge=0, le=5)
    uplink_bps_median: float = Field(5e6, gt=0)
    uplink_sigma: float = Field(0.8, ge=0, le=5)
    downlink_bps_median: float = Field(20e6, gt=0)
    downlink_sigma: float = Field(0.8, ge=0, le=5)
    days: int = Field(7, ge=1, le=366)
    utc_spread_h: float = Field(24.0, ge=0, le=24)
    window_start_h: float = Field(22.0, ge=0, le=24)
    window_start_sd_h: float = Field(2.0, ge=0, le=24)
    window_median_h: float = Field(6.0, gt=0, le=24)
    window_sigma: float = Field(0.5, ge=0, le=5)
    daily_chance: float = Field(0.8, ge=0, le=1)
    always_online: float = Field(0.0, ge=0, le=1)


class TraceConfig(Strict):
    """Where the clock's population comes from: a fedsim trace file (``path``), FedScale's published pickles
    (``fedscale_capacity`` and optionally ``fedscale_behaviour``), or else a synthetic population."""

    path: Path | None = None
    fedscale_capacity: Path | None = None
    fedscale_behaviour: Path | None = None
    synthetic: SyntheticTraceConfig = SyntheticTraceConfig()

    @model_validator(mode="after")
    def _one_source(self) -> TraceConfig:
        if self.path is not None and self.fedscale_capacity is not None:
            raise ValueError("trace: give path (a fedsim trace) or fedscale_capacity (FedScale's), not both")
        if self.fedscale_behaviour is not None and self.fedscale_capacity is None:
            raise ValueError("trace: fedscale_behaviour needs fedscale_capacity (the devices it describes)")
        return self


class AsyncConfig(Strict):
    """``kind: fedbuff`` (Nguyen et al. 2022) or ``fedasync`` (Xie et al. 2019) runs the asynchronous server:
    ``concurrency`` clients in flight, each update weighted by ``staleness`` (``polynomial``: (1 + s)^-a;
    ``hinge``: 1 up to b, then 1 / (a (s - b) + 1); ``constant``); FedBuff steps the server once per ``buffer``
    arrivals through the algorithm's server update, FedAsync mixes each local model in at ``alpha`` times its
    weight. ``sync`` is the synchronous baseline on the same clock and trace: ``concurrency`` clients start
    together (the cohort over-selected), the round ends when ``buffer`` updates have arrived or ``deadline_s``
    has passed, and the stragglers' work is discarded. A run's ``rounds`` count server steps."""

    kind: Literal["none", "fedbuff", "fedasync", "sync"] = "none"
    concurrency: int = Field(100, ge=1, le=1_000_000)
    buffer: int = Field(10, ge=1, le=1_000_000, description="FedBuff's K: arrivals per server step")
    staleness: Literal["constant", "polynomial", "hinge"] = "polynomial"
    staleness_a: float = Field(0.5, ge=0, le=100)
    staleness_b: float = Field(4.0, ge=0, le=1e9)
    alpha: float = Field(0.6, gt=0, le=1, description="FedAsync's mixing weight")
    deadline_s: float | None = Field(None, gt=0, le=1e9, description="sync: a round's time limit on the clock")
    max_draws: int = Field(64, ge=1, le=1_000_000, description="candidates a free slot draws before it sleeps")
    retry_s: float = Field(60.0, gt=0, le=1e9, description="a sleeping slot's retry when no candidate comes online")
    target_accuracy: float | None = Field(None, ge=0, le=1, description="summary.json's time_to_target_s")
    trace: TraceConfig = TraceConfig()

    @model_validator(mode="after")
    def _settings_fit(self) -> AsyncConfig:
        if self.kind == "sync" and self.buffer > self.concurrency:
            raise ValueError(
                f"asynchronous.buffer={self.buffer} updates can never arrive from concurrency={self.concurrency}"
                " clients a synchronous round (over-select: concurrency >= buffer)"
            )
        if self.deadline_s is not None and self.kind != "sync":
            raise ValueError(f"asynchronous.deadline_s ends a synchronous round; kind={self.kind} has no rounds")
        return self

    @property
    def enabled(self) -> bool:
        return self.kind != "none"
