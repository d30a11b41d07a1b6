"""What of a run's config each engine reads, named as protocols: the engines and the lifecycle depend on these,
not on :class:`fedsim.config.RunConfig`, which satisfies them (the builder, :mod:`fedsim.api.launch`, passes it).

:class:`RunSettings` is what every run reads (the lifecycle's sections, the loop's and the plan's); a
decentralised run reads nothing more. :class:`EngineSettings` adds what the federated round reads: the devices'
emulation and scheduler, federated evaluation, cohort sampling, the asynchronous server, the attackers' warning,
and a copy with a section changed (``Simulation.set``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol, Self

from fedsim.config import (
    AsyncConfig,
    CheckpointConfig,
    ClockConfig,
    DataConfig,
    EmulationConfig,
    FederatedEvalConfig,
    ModelConfig,
    SchedulerConfig,
    StateConfig,
    TaskConfig,
)
from fedsim.sim.rounds.plan import PlanSettings
from fedsim.sim.run.loop import LoopSettings


class RunSettings(PlanSettings, LoopSettings, Protocol):
    """The sections every run reads: its name and seed, the data, model and task, where state and checkpoints
    go, the clock, evaluation's cadence, the accelerator and threads, and what the loop and the plan read."""

    @property
    def name(self) -> str: ...

    @property
    def seed(self) -> int: ...

    @property
    def accelerator(self) -> Literal["auto", "cpu", "cuda"]: ...

    @property
    def threads(self) -> int | None: ...

    @property
    def data_on_device_mb(self) -> float: ...

    @property
    def data(self) -> DataConfig: ...

    @property
    def model(self) -> ModelConfig: ...

    @property
    def task(self) -> TaskConfig: ...

    @property
    def state(self) -> StateConfig: ...

    @property
    def checkpoint(self) -> CheckpointConfig: ...

    @property
    def clock(self) -> ClockConfig: ...

    @property
    def eval_every(self) -> int: ...

    @property
    def eval_batch_size(self) -> int: ...


class EngineSettings(RunSettings, Protocol):
    """What a federated run (synchronous or asynchronous) reads beyond every run's sections."""

    @property
    def sampling(self) -> Literal["fixed", "poisson"]: ...

    @property
    def emulation(self) -> EmulationConfig: ...

    @property
    def scheduler(self) -> SchedulerConfig: ...

    @property
    def federated_eval(self) -> FederatedEvalConfig: ...

    @property
    def asynchronous(self) -> AsyncConfig: ...

    def attackers_warning(self) -> str | None: ...

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self: ...
