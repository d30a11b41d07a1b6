"""The one small interface between the engine and the hardware: where tensors live, streams, events, clocks.

A rank trains on one *accelerator*: ``cpu``, or ``cuda:LOCAL_RANK % device_count``. Everything device-specific
the engine does goes through :class:`Accelerator`, so the CUDA path is the CPU path with other objects behind
the same calls:

- ``device`` is where the replica, gradients, sums, global model and algorithm state are created.
- :meth:`Accelerator.side_stream` is a CUDA stream for copies that overlap training (a no-op context on CPU).
- :class:`Timeline` records marks (CUDA events, or ``perf_counter`` readings on CPU) while clients train and
  turns them into seconds once per round, so the host waits for the device a constant number of times per
  round, not once per client.
- :meth:`Accelerator.to_host` copies client state to (pinned) host memory without waiting, and
  :meth:`Accelerator.record` marks when such copies are done (a CUDA event), for the state write-back.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch
from torch import Tensor

from fedsim.config import ConfigError
from fedsim.cores import env_count

AcceleratorKind = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True)
class Accelerator:
    """The torch device of this rank and the few device-specific operations the engine needs."""

    device: torch.device

    @classmethod
    def resolve(cls, kind: AcceleratorKind, local_rank: int | None = None) -> Accelerator:
        """``auto``: CUDA when torch sees a GPU, else CPU; ``cuda``: GPU ``local_rank % device_count`` (by default
        this process's ``LOCAL_RANK``, 0 outside a pool) or a :class:`ConfigError` saying why there is none."""
        if local_rank is None:
            local_rank = env_count("LOCAL_RANK", 0)
        available = torch.cuda.is_available()
        if kind == "cpu" or (kind == "auto" and not available):
            return cls(torch.device("cpu"))
        if not available:
            raise ConfigError(f"accelerator=cuda, but torch {torch.__version__} sees no CUDA device")
        index = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(index)
        return cls(torch.device("cuda", index))

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def name(self) -> str:
        """``cpu`` or the GPU's model (``cuda:0 NVIDIA H100 80GB HBM3``), for the run store and the dashboard."""
        if not self.is_cuda:
            return "cpu"
        return f"{self.device} {torch.cuda.get_device_name(self.device)}"

    def side_stream(self) -> contextlib.AbstractContextManager[object]:
        """A context whose work runs on a second stream (CUDA), so copies overlap training; no-op on CPU."""
        if not self.is_cuda:
            return contextlib.nullcontext()
        return torch.cuda.stream(_side_stream(self.device))

    def wait_side_stream(self) -> None:
        """Make the current stream wait for what was queued on the side stream (before using its copies)."""
        if self.is_cuda:
            torch.cuda.current_stream(self.device).wait_stream(_side_stream(self.device))

    def to_device(self, tensor: Tensor) -> Tensor:
        """``tensor`` on this accelerator; from pinned host memory the copy does not block the host."""
        return tensor.to(self.device, non_blocking=tensor.is_pinned())

    def to_host(self, tensor: Tensor) -> Tensor:
        """``tensor`` in host memory: itself when it is there already, else a pinned copy the host does not
        wait for (read it only after :meth:`synchronize` or :meth:`Timeline.read`)."""
        if tensor.device.type == "cpu":
            return tensor
        host = torch.empty(tensor.shape, dtype=tensor.dtype, device="cpu", pin_memory=True)
        host.copy_(tensor, non_blocking=True)
        return host

    def record(self) -> Marker:
        """A marker of the work queued so far on the current stream (a CUDA event); on CPU, already done."""
        if not self.is_cuda:
            return _DONE
        event = torch.cuda.Event()
        event.record()
        return event

    def synchronize(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def timeline(self) -> Timeline:
        return Timeline(self)


class Marker(Protocol):
    """A point in a stream's work: ``query`` says whether the device has reached it, ``synchronize`` waits."""

    def query(self) -> bool: ...

    def synchronize(self) -> None: ...


class _Done:
    """The CPU's marker: its work is done when it is queued."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


_DONE = _Done()
_SIDE_STREAMS: dict[torch.device, torch.cuda.Stream] = {}


def _side_stream(device: torch.device) -> torch.cuda.Stream:
    if device not in _SIDE_STREAMS:
        _SIDE_STREAMS[device] = torch.cuda.Stream(device)
    return _SIDE_STREAMS[device]


@dataclass
class Timeline:
    """Marks taken while a round trains, read as unix seconds once at its end.

    On CUDA a mark is an event recorded on the current stream, so it times the device's work, not the host's
    queueing; on CPU it is ``time.perf_counter()``. Both are anchored to the unix time of :meth:`begin`.
    """

    accelerator: Accelerator
    _anchor_unix: float = 0.0
    _anchor_perf: float = 0.0
    _origin: torch.cuda.Event | None = None
    _marks: list[float | torch.cuda.Event] = field(default_factory=list)

    def begin(self) -> None:
        self._marks.clear()
        self._anchor_unix, self._anchor_perf = time.time(), time.perf_counter()
        if self.accelerator.is_cuda:
            self._origin = torch.cuda.Event(enable_timing=True)
            self._origin.record()

    def mark(self) -> int:
        """Record a mark now; returns its index for :meth:`read`."""
        if self.accelerator.is_cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._marks.append(event)
        else:
            self._marks.append(time.perf_counter())
        return len(self._marks) - 1

    def read(self) -> list[float]:
        """Every mark as unix seconds; on CUDA this waits for the device once."""
        if not self.accelerator.is_cuda:
            return [self._anchor_unix + (m - self._anchor_perf) for m in self._marks]  # type: ignore[operator]
        self.accelerator.synchronize()
        origin = self._origin
        assert origin is not None
        return [self._anchor_unix + origin.elapsed_time(m) / 1000.0 for m in self._marks]  # type: ignore[arg-type]
