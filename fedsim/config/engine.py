"""How the engine runs: client state, the scheduler, emulated heterogeneity, checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from fedsim.config.base import Strict

MAX_SHARE = 0.02  # checkpoint.max_share's default: CheckFreq's bound on the overhead
MAX_INTERVAL_S = 300.0  # checkpoint.max_interval_s's default: at most five minutes of work lost to a crash


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

    ``lpt``: longest predicted first onto the device that would finish it earliest, a client's cost being its
    samples times its device's ``emulation.slowdown``: every run of one configuration, and a resumed one, assigns
    alike. ``learned``: the same on the seconds of a per-device runtime model fitted on the last ``window``
    clients each device trained (Parrot's; an even split until every device has ``warmup`` observations): it
    finds devices slower than declared, and follows the machine's timing noise, so two runs may differ in which
    rank trains a client. ``even``: the same number of clients per device.
    """

    kind: Literal["lpt", "learned", "even"] = Field(
        "lpt",
        description="lpt: longest first on declared speeds; learned: on measured speeds; even: the same count each",
    )
    window: int = Field(200, ge=2, description="clients the runtime model is fitted on, per device")
    warmup: int = Field(4, ge=2, description="observations per device before learned replaces an even split")


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
    a time as one stacked model (torch.func), for algorithms with a fused form and models without BatchNorm (a
    frozen base with adapters runs once over the clients' rows, only the trained modules stacked); ``auto``
    fused where that applies and pays (not, on a CPU, for convolutions with large maps:
    :func:`fedsim.sim.executors.choice.sequential_is_faster`), else sequential."""

    kind: Literal["sequential", "fused", "auto"] = Field(
        "sequential", description="sequential, fused or auto, as above"
    )
    clients: int = Field(32, ge=1, le=4096, description="clients trained together by the fused executor")


class CheckpointConfig(Strict):
    """Crash-safe checkpoints, keeping the newest ``keep``. ``every: auto`` (the default) chooses how many rounds
    apart they are from what a checkpoint and a round measurably cost, as CheckFreq does (Mohan et al., FAST
    2021; :mod:`fedsim.sim.persist.period`): checkpoints take at most ``max_share`` of the run's wall time, and
    one is taken at least every ``max_interval_s`` seconds (this bound wins where the two disagree). ``every: k``
    checkpoints every k rounds; ``every: 0`` only when the run is interrupted between rounds."""

    every: int | Literal["auto"] = Field(
        "auto",
        description="auto: a period chosen from measured costs, within max_share and max_interval_s; k: every k"
        " rounds; 0: only when the run is interrupted between rounds",
    )
    keep: int = Field(2, ge=1, description="the newest checkpoints kept; older ones are deleted")
    max_share: float = Field(
        MAX_SHARE, gt=0, le=0.5, description="auto: the largest share of wall time checkpoints may take (0.02: 2%)"
    )
    max_interval_s: float = Field(
        MAX_INTERVAL_S, gt=0, description="auto: seconds of wall time between checkpoints at most (wins over max_share)"
    )

    @field_validator("every", mode="before")
    @classmethod
    def _auto_or_rounds(cls, every: object) -> object:
        if every == "auto" or (isinstance(every, int) and not isinstance(every, bool) and every >= 0):
            return every
        raise ValueError("must be auto, or a whole number of rounds >= 0 (0: only when interrupted)")

    @model_validator(mode="after")
    def _bounds_need_auto(self) -> CheckpointConfig:
        # config.json holds every field, the bounds' defaults too: only a value the user changed is refused
        changed = [
            name
            for name, default in (("max_share", MAX_SHARE), ("max_interval_s", MAX_INTERVAL_S))
            if getattr(self, name) != default
        ]
        if self.every != "auto" and changed:
            raise ValueError(
                f"checkpoint.{changed[0]} bounds the period that every: auto chooses; with every: {self.every} it"
                " would be ignored (set every: auto, or drop it)"
            )
        return self

    @property
    def fixed(self) -> int:
        """The rounds between checkpoints set by hand (0: none, or ``auto``'s to choose)."""
        return 0 if self.every == "auto" else self.every


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
