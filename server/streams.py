"""What the split service keeps per device, session and stream, and the fair lock devices take turns on."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import grpc

MAX_DETAILS = 300  # characters of an error message: the offending input is never echoed whole
RESERVED_WORKERS = 2  # threads kept free of streams, so OpenSession and Status answer while streams run


def capped(message: str) -> str:
    if len(message) <= MAX_DETAILS:
        return message
    return f"{message[: MAX_DETAILS - 30]}... ({len(message)} characters in all)"


@dataclass
class DeviceStats:
    batches: int = 0
    examples: int = 0
    bytes_received: int = 0
    rejected: int = 0
    last_loss: float = float("nan")


@dataclass
class Session:
    device: str
    used: float  # when it was last used, on the service's clock


@dataclass
class Stream:
    """An open Train or Evaluate stream: whose, its RPC (to cut it when idle), when it last received."""

    device: str
    context: grpc.ServicerContext
    last: float = field(default_factory=time.monotonic)
    idle: bool = False  # cut by the server for idleness


class StreamTable:
    """The open Train and Evaluate streams: admitted within a per-device and a server-wide cap, freed when their
    handler returns, and cut when idle."""

    def __init__(self, per_device: int, total: int) -> None:
        self.per_device, self.total = per_device, total
        self._open: dict[int, Stream] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)

    @contextlib.contextmanager
    def admit(self, device: str, context: grpc.ServicerContext) -> Iterator[Stream]:
        """A stream's slot for the ``with`` block (the handler), or RESOURCE_EXHAUSTED. The slot is not tied to
        gRPC's own end of the RPC, which waits for the device to half-close: a device that sent a message gRPC
        could not parse may never do so, and its slots held until then locked it out."""
        with self._lock:
            # a stream the reaper cut no longer counts against its device, though its handler may not have
            # returned yet: the device was told CANCELLED and may stream again at once
            mine = sum(1 for s in self._open.values() if s.device == device and not s.idle)
            if mine >= self.per_device:
                refused = f"device {device!r} has {mine} streams open (server.streams_per_device={self.per_device})"
            elif len(self._open) >= self.total:
                refused = f"the server has {self.total} streams open (server.workers - {RESERVED_WORKERS}): try later"
            else:
                refused = ""
                key, stream = next(self._ids), Stream(device, context)
                self._open[key] = stream
        if refused:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, capped(refused))
        try:
            yield stream
        finally:
            with self._lock:
                del self._open[key]

    def reap_idle(self, limit_s: float) -> int:
        """Cut every stream that has received nothing for ``limit_s`` seconds; returns how many."""
        now = time.monotonic()
        with self._lock:
            idle = [s for s in self._open.values() if not s.idle and now - s.last > limit_s]
            for stream in idle:
                stream.idle = True
        for stream in idle:
            stream.context.cancel()  # the handler's read ends; its thread is free again
        return len(idle)


class FifoLock:
    """A lock that admits waiters in arrival order. Python's lock is not fair: a device streaming flat out
    would take the trainer again before a waiting device's thread wakes, and starve it."""

    def __init__(self) -> None:
        self._turn = threading.Condition()
        self._next = self._serving = 0

    def __enter__(self) -> None:
        with self._turn:
            ticket, self._next = self._next, self._next + 1
            self._turn.wait_for(lambda: self._serving == ticket)

    def __exit__(self, *exc: object) -> None:
        with self._turn:
            self._serving += 1
            self._turn.notify_all()


def cut_off(context: grpc.ServicerContext) -> bool | None:
    """Whether a terminated RPC was cancelled by its client or lost with its connection; None if unknown.

    A killed device's stream can end like a clean half-close (the transport's end reads as end of stream) and
    be cancelled a moment later. gRPC's sync server records that in its RPC state (grpcio 1.85, pinned) but has
    no public accessor; the test of devices that come and go fails if that changes.
    """
    client = getattr(getattr(context, "_state", None), "client", None)
    return None if client is None else client == "cancelled"
