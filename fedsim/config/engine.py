"""How the engine runs: client state, the scheduler, emulated heterogeneity, checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from fedsim.config.base import Strict


class StateConfig(Strict):
    """Where per-client state lives: ``memory``, or ``disk`` (one safetensors file per client).

    A client's new state goes to the store as soon as it is on the host; ``in_flight`` bounds how many states
    may be on their way there at once (copies from a GPU into pinned host memory), so memory outside the store
    is at most ``in_flight`` client states, whatever the cohort."""

    backend: Literal["memory", "disk"] = Field(
        "memory", description="memory, or disk (a safetensors file per client under dir)"
    )
    dir: Path | None = Field(None, description="disk backend directory; default OUT/state")
    cache_mb: float = Field(256.0, ge=0, description="LRU cache of the disk backend (MiB)")
    fsync: bool = Field(
        True, description="disk: fsync each state file as it is written (safe against a power cut, slower)"
    )
    in_flight: int = Field(4, ge=1, le=4096, description="client states copied to the host at once (GPU)")
    on_damage: Literal["stop", "reset"] = Field(
        "stop",
        description="a client's state file found truncated or altered: stop the run (interrupted, resumable from"
        " the newest intact checkpoint) or restart that client from fresh state with a warning",
    )


class SchedulerConfig(Strict):
    """How a round's clients are assigned to devices.

    ``lpt``: longest predicted time first onto the device that would finish it earliest, using a per-device
    runtime model fitted on the last ``window`` clients (even split until every device has ``warmup``
    observations); ``even``: the same number of clients per device.
    """

    kind: Literal["lpt", "even"] = Field(
        "lpt", description="lpt: longest predicted first; even: the same count per device"
    )
    window: int = Field(200, ge=2, description="clients the runtime model is fitted on, per device")
    warmup: int = Field(4, ge=2, description="observations per device before lpt replaces an even split")


class EmulationConfig(Strict):
    """Heterogeneity emulation: modelled device speeds and unreliable clients.

    ``slowdown[d]`` multiplies device d's measured seconds on the virtual clock (1 = as measured, 2 = half as
    fast); ``availability`` is the chance a client can be sampled in a round; ``dropout`` the chance a sampled
    client drops out and contributes nothing (its state stays as it was).
    """

    slowdown: tuple[float, ...] = Field(
        (), description="each device's factor on its measured seconds (empty: 1 for every device)"
    )
    availability: float = Field(1.0, gt=0, le=1, description="the chance a client can be sampled in a round")
    dropout: float = Field(0.0, ge=0, lt=1, description="the chance a sampled client drops out and contributes nothing")

    @field_validator("slowdown")
    @classmethod
    def _positive(cls, slowdown: tuple[float, ...]) -> tuple[float, ...]:
        if any(f <= 0 for f in slowdown):
            raise ValueError(f"every slow-down factor must be > 0, got {list(slowdown)}")
        return slowdown


class ExecutorConfig(Strict):
    """How a rank trains its clients: ``sequential`` one after another on one replica; ``fused`` ``clients`` at
    a time as one stacked model (torch.func), for algorithms with a fused form and models without BatchNorm;
    ``auto`` fused where that applies and pays (not, on a CPU, for convolutions with large maps:
    :func:`fedsim.sim.executors.choice.sequential_is_faster`), else sequential."""

    kind: Literal["sequential", "fused", "auto"] = Field(
        "sequential", description="sequential, fused or auto, as above"
    )
    clients: int = Field(32, ge=1, le=4096, description="clients trained together by the fused executor")


class CheckpointConfig(Strict):
    """Crash-safe checkpoints every ``every`` rounds (0 = none), keeping the newest ``keep``."""

    every: int = Field(
        0, ge=0, description="checkpoint every this many rounds (0: only when the run is interrupted between rounds)"
    )
    keep: int = Field(2, ge=1, description="the newest checkpoints kept; older ones are deleted")


class FederatedEvalConfig(Strict):
    """Federated evaluation (``kind: holdout``; ``none``: off): ``holdout`` of each client's samples is held out
    from training, and every evaluated round scores the global model, and a personalised algorithm's personal
    models, on the held-out data of the round's clients, reporting the mean and the 10th/90th percentiles across
    clients."""

    kind: Literal["none", "holdout"] = Field(
        "none", description="holdout: score on each client's held-out samples; none: off"
    )
    holdout: float = Field(0.0, ge=0, lt=1, description="the share of each client's samples held out")
    personal: bool = Field(True, description="also score personal models (Ditto's) where the algorithm has them")

    @model_validator(mode="after")
    def _holdout_fits(self) -> FederatedEvalConfig:
        if self.kind == "none" and self.holdout:
            raise ValueError("federated_eval.holdout is set but federated_eval.kind is none (set kind: holdout)")
        if self.kind == "holdout" and not self.holdout:
            raise ValueError("federated_eval.kind=holdout needs holdout > 0: the share of each client's samples")
        return self

    @property
    def enabled(self) -> bool:
        return self.kind != "none"
