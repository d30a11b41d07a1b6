"""The run's virtual clock: the population trace it reads and how a synchronous round ends on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from fedsim.config.base import Strict


class SyntheticTraceConfig(Strict):
    """A generated population (fedsim.traces.synthetic): ``clients`` device profiles (run clients map onto
    them by id modulo), log-normal speeds and links, nightly windows across time zones."""

    clients: int = Field(
        1000, ge=1, le=10_000_000, description="device profiles generated (run clients map onto them by id modulo)"
    )
    seed: int | None = Field(None, ge=0, description="default: the run's seed")
    compute_s_median: float = Field(0.005, gt=0, description="seconds to train on one sample, median device")
    compute_sigma: float = Field(0.6, ge=0, le=5, description="log-normal spread of the devices' compute speed")
    uplink_bps_median: float = Field(5e6, gt=0, description="the median uplink, bits per second")
    uplink_sigma: float = Field(0.8, ge=0, le=5, description="log-normal spread of the uplinks")
    downlink_bps_median: float = Field(20e6, gt=0, description="the median downlink, bits per second")
    downlink_sigma: float = Field(0.8, ge=0, le=5, description="log-normal spread of the downlinks")
    days: int = Field(7, ge=1, le=366, description="days of availability windows generated (the trace repeats after)")
    utc_spread_h: float = Field(24.0, ge=0, le=24, description="hours of time zones the clients span")
    window_start_h: float = Field(22.0, ge=0, le=24, description="the local hour the nightly window opens, on average")
    window_start_sd_h: float = Field(2.0, ge=0, le=24, description="the spread of the window's opening hour")
    window_median_h: float = Field(6.0, gt=0, le=24, description="the median window length, hours")
    window_sigma: float = Field(0.5, ge=0, le=5, description="log-normal spread of window lengths")
    daily_chance: float = Field(0.8, ge=0, le=1, description="the chance a client has a window on a given day")
    always_online: float = Field(0.0, ge=0, le=1, description="the share of clients online at all times")


class TraceConfig(Strict):
    """Where the clock's population comes from: a fedsim trace file (``path``), FedScale's published pickles
    (``fedscale_capacity`` and optionally ``fedscale_behaviour``), or else a synthetic population."""

    path: Path | None = Field(None, description="a fedsim trace file (.npz)")
    fedscale_capacity: Path | None = Field(None, description="FedScale's device capacity pickle")
    fedscale_behaviour: Path | None = Field(None, description="FedScale's device behaviour (availability) pickle")
    synthetic: SyntheticTraceConfig = Field(
        SyntheticTraceConfig(), description="the generated population, when no file is named"
    )

    @model_validator(mode="after")
    def _one_source(self) -> TraceConfig:
        if self.path is not None and self.fedscale_capacity is not None:
            raise ValueError("trace: give path (a fedsim trace) or fedscale_capacity (FedScale's), not both")
        if self.fedscale_behaviour is not None and self.fedscale_capacity is None:
            raise ValueError("trace: fedscale_behaviour needs fedscale_capacity (the devices it describes)")
        return self


class ClockConfig(Strict):
    """Where a run's virtual time comes from. ``measured``: the pool's own, each device's measured seconds times
    ``emulation.slowdown``, a round lasting its slowest device. ``trace``: the population ``trace`` (the clock
    asynchronous runs always read): a synchronous round starts ``clients_per_round + over_select`` online
    clients at once, drawn uniformly (Bonawitz et al., MLSys 2019; FedScale's over-commitment) or, with a
    ``selection`` that is not a uniform sample, chosen by it among the clients online at the round's start
    (Oort reads the trace's task durations); each task lasts its device's compute and links; the round ends
    when ``clients_per_round`` updates have arrived or at ``deadline_s``, and the stragglers' work, or a
    client's that went offline, is thrown away."""

    kind: Literal["measured", "trace"] = Field(
        "measured", description="measured: the pool's own seconds; trace: the population trace's virtual clock"
    )
    over_select: int = Field(0, ge=0, le=1_000_000, description="clients started beyond the cohort each round")
    deadline_s: float | None = Field(None, gt=0, le=1e9, description="a synchronous round's limit on the clock")
    max_draws: int = Field(64, ge=1, le=1_000_000, description="candidates a free slot draws before it sleeps")
    retry_s: float = Field(60.0, gt=0, le=1e9, description="a sleeping slot's retry when no candidate comes online")
    target_accuracy: float | None = Field(None, ge=0, le=1, description="summary.json's time_to_target_s")
    trace: TraceConfig = Field(TraceConfig(), description="the population the trace clock reads")

    @model_validator(mode="after")
    def _settings_fit(self) -> ClockConfig:
        rounds = self.over_select or self.deadline_s is not None
        if self.kind == "measured" and (rounds or self.target_accuracy is not None):
            raise ValueError(
                "clock: over_select, deadline_s and target_accuracy are the trace clock's: set clock.kind: trace"
            )
        return self


def clock_refusal(cfg: Any) -> str | None:
    """What the trace clock does not define or account for yet in ``cfg`` (a RunConfig), one line; None when
    the run fits its clock."""
    clock, mode = cfg.clock, cfg.asynchronous.kind
    if mode != "none" and clock.kind != "trace":
        return f"asynchronous.kind={mode} runs on the population trace: set clock.kind: trace"
    if clock.kind != "trace":
        return None
    if cfg.decentralised:
        return f"clock.kind=trace: a decentralised run (algorithm.kind={cfg.algorithm.kind}) has no rounds on it yet"
    if mode != "none":
        rounds = {"over_select": clock.over_select, "deadline_s": clock.deadline_s}
        set_ = [k for k, v in rounds.items() if v]
        return f"clock.{set_[0]} sets a synchronous round: asynchronous.kind={mode} has none" if set_ else None
    started = cfg.cohort_size + clock.over_select
    if started > cfg.data.clients:
        return (
            f"clock: clients_per_round + over_select = {started} clients start a round, more than data.clients="
            f"{cfg.data.clients} (a client trains one task at a time)"
        )
    refused = {
        "sampling": (cfg.sampling != "fixed", "the trace decides who is online, not a coin per client"),
        "emulation": (
            cfg.emulation.availability < 1 or cfg.emulation.dropout > 0,
            "the trace says who is online and who drops",
        ),
    }
    for section, (used, why) in refused.items():
        if used:
            return f"{section}: not supported with clock.kind=trace yet ({why})"
    deployed = {"noise_cohort": cfg.privacy.noise_cohort, "population": cfg.privacy.population}
    for field, value in deployed.items():
        if cfg.privacy.enabled and value is not None:  # a larger deployment's epsilon rests on its sampling
            return (
                f"privacy.{field}: on clock.kind=trace the trace decides who reports, so no sampling amplifies a"
                " simulated deployment's epsilon; drop it (the run's own epsilon is accounted unsampled)"
            )
    return None
