"""A population trace: each client's compute speed, links and availability, as the virtual clock reads them.

The file is a NumPy ``.npz`` archive (loaded with ``allow_pickle=False``) holding, for ``n`` clients:

- ``compute_s`` (n,) float64: seconds to train on one sample (forward and backward) on the client's device;
- ``uplink_bps``, ``downlink_bps`` (n,) float64: the client's link rates, bits per second;
- ``period_s`` (n,) float64: the client's availability repeats every period (a day, a week, or FedScale's
  per-client ``finish_time``);
- ``offsets`` (n + 1,) int64, ``starts``, ``ends`` (offsets[n],) float64: client i is online during
  ``[starts[j], ends[j])`` for ``offsets[i] <= j < offsets[i + 1]``, in seconds from the start of each period:
  sorted, non-overlapping, within ``[0, period)``. One interval ``[0, period)`` is always online; none is never;
- ``meta``: a JSON object as a string: ``source`` (``synthetic``, ``fedscale``, ...), ``synthetic`` (true or
  false) and whatever made the trace (a generator's parameters and seed, the files it was read from).

Client ``cid`` of a run reads row ``cid % n``, so a trace of 1,000 devices serves a population of a million, as
FedScale maps its clients onto its device profiles. A task of ``samples`` training samples that downloads
``down_bytes`` and uploads ``up_bytes`` lasts ``compute_s * samples + 8 * down_bytes / downlink_bps + 8 *
up_bytes / uplink_bps`` seconds on the virtual clock.
"""

from __future__ import annotations

import hashlib
import json
import math
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fedsim.config import ConfigError

ZIP = (b"PK\x03\x04", b"PK\x05\x06")  # an .npz archive is a zip file (its first entry, or none)
NPY = b"\x93NUMPY"  # a lone .npy array
KINDS = {
    "U": "strings",
    "S": "bytes",
    "O": "objects",
    "b": "booleans",
    "c": "complex numbers",
    "f": "non-whole numbers",
}
ARRAYS = ("compute_s", "uplink_bps", "downlink_bps", "period_s", "offsets", "starts", "ends")


@dataclass(frozen=True, eq=False)
class Trace:
    """A checked population trace (see the module's description of each array)."""

    compute_s: np.ndarray
    uplink_bps: np.ndarray
    downlink_bps: np.ndarray
    period_s: np.ndarray
    offsets: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    meta: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check(self)

    @property
    def clients(self) -> int:
        return len(self.compute_s)

    def row(self, cid: int) -> int:
        return cid % self.clients

    def duration(self, cid: int, samples: int, down_bytes: float, up_bytes: float) -> float:
        """Seconds of a task: training on ``samples`` samples, the model down and the update up."""
        i = self.row(cid)
        compute = float(self.compute_s[i]) * samples
        return compute + 8.0 * down_bytes / float(self.downlink_bps[i]) + 8.0 * up_bytes / float(self.uplink_bps[i])

    def _intervals(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.starts[lo:hi], self.ends[lo:hi]

    def online(self, cid: int, t: float) -> bool:
        """Whether client ``cid`` is online at time ``t``."""
        i = self.row(cid)
        starts, ends = self._intervals(i)
        phase = t % float(self.period_s[i])
        j = int(np.searchsorted(starts, phase, side="right")) - 1
        return j >= 0 and phase < float(ends[j])

    def online_until(self, cid: int, t: float) -> float:
        """When client ``cid``, online at ``t``, goes offline (``inf`` if never); ``t`` itself if offline at
        ``t``. An interval that ends with the period and one that starts the next period are one stretch."""
        i = self.row(cid)
        starts, ends = self._intervals(i)
        period = float(self.period_s[i])
        base = math.floor(t / period) * period
        j = int(np.searchsorted(starts, t - base, side="right")) - 1
        if j < 0 or t - base >= float(ends[j]):
            return t
        for _ in range(len(starts) + 1):
            end = base + float(ends[j])
            if j < len(starts) - 1 or float(ends[j]) < period or float(starts[0]) > 0.0:
                return end
            base, j = base + period, 0  # the stretch runs on into the next period
        return math.inf  # online through a whole period: always

    def next_online(self, cid: int, t: float) -> float:
        """The first time at or after ``t`` when client ``cid`` is online (``inf`` if never)."""
        i = self.row(cid)
        starts, ends = self._intervals(i)
        if len(starts) == 0:
            return math.inf
        period = float(self.period_s[i])
        base = math.floor(t / period) * period
        phase = t - base
        j = int(np.searchsorted(starts, phase, side="right")) - 1
        if j >= 0 and phase < float(ends[j]):
            return t
        if j + 1 < len(starts):
            return base + float(starts[j + 1])
        return base + period + float(starts[0])

    def fingerprint(self) -> str:
        """SHA-256 of the arrays and the meta: what a run records to say which trace it used."""
        digest = hashlib.sha256()
        for name in ARRAYS:
            digest.update(np.ascontiguousarray(getattr(self, name)).tobytes())
        digest.update(json.dumps(dict(self.meta), sort_keys=True).encode())
        return digest.hexdigest()

    def save(self, path: Path) -> None:
        arrays = {name: getattr(self, name) for name in ARRAYS}
        with open(path, "wb") as f:
            np.savez(f, **arrays, meta=np.array(json.dumps(dict(self.meta), sort_keys=True)))


def check(trace: Trace) -> None:
    """One line naming what is wrong, or nothing."""
    for name in ARRAYS:
        if why := _not_numbers(name, getattr(trace, name)):
            raise ConfigError(f"trace: {why}")
    if trace.compute_s.ndim != 1:
        raise ConfigError(f"trace: compute_s has shape {list(trace.compute_s.shape)}, expected one value per client")
    n = len(trace.compute_s)
    if n == 0:
        raise ConfigError("trace: no clients")
    for name in ("compute_s", "uplink_bps", "downlink_bps", "period_s"):
        values = getattr(trace, name)
        if values.shape != (n,):
            raise ConfigError(f"trace: {name} has shape {list(values.shape)}, expected [{n}]")
        bad = ~np.isfinite(values) | (values <= 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ConfigError(f"trace: {name} of client {i} is {values[i]} (must be finite and > 0)")
    offsets, starts, ends = trace.offsets, trace.starts, trace.ends
    if offsets.shape != (n + 1,) or offsets[0] != 0 or np.any(np.diff(offsets) < 0):
        raise ConfigError(f"trace: offsets must be {n + 1} non-decreasing indices from 0")
    if starts.shape != (int(offsets[-1]),) or ends.shape != starts.shape:
        k = int(offsets[-1])
        got = f"{list(starts.shape)} and {list(ends.shape)}"
        raise ConfigError(f"trace: offsets end at {k}: starts and ends must have shape [{k}], not {got}")
    if not (np.isfinite(starts).all() and np.isfinite(ends).all()):
        raise ConfigError("trace: an availability interval is not finite")
    owner = np.repeat(np.arange(n), np.diff(offsets))
    wrong = (starts < 0) | (ends <= starts) | (ends > trace.period_s[owner])
    same_client = owner[1:] == owner[:-1]
    overlap = np.zeros_like(wrong)
    overlap[1:] = same_client & (starts[1:] < ends[:-1])
    if (wrong | overlap).any():
        j = int(np.flatnonzero(wrong | overlap)[0])
        raise ConfigError(
            f"trace: client {int(owner[j])}'s interval [{starts[j]}, {ends[j]}) is not sorted, disjoint and "
            f"within [0, {trace.period_s[owner[j]]})"
        )
    if len(starts) == 0:
        raise ConfigError("trace: no client is ever online")


def load(path: Path) -> Trace:
    """A trace file (see the module's description); one line naming the file and what is wrong with it
    otherwise: not an .npz archive (a CSV, a JSON file, a lone .npy array), a truncated or damaged one, a
    missing array, an array of strings or of the wrong shape, values the checks refuse."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(NPY))
        if not head.startswith(ZIP):  # np.load would try it as a pickle and advise allow_pickle: never here
            raise ConfigError(f"{path}: cannot read a trace: {_not_npz(head)}")
        with np.load(path, allow_pickle=False) as data:
            missing = [name for name in (*ARRAYS, "meta") if name not in data.files]
            if missing:
                raise ConfigError(f"{path}: not a fedsim trace (missing {', '.join(missing)})")
            arrays = {name: np.asarray(data[name]) for name in ARRAYS}
            meta = json.loads(str(data["meta"]))
    except (zipfile.BadZipFile, zlib.error) as error:  # cut short, or its bytes changed
        raise ConfigError(f"{path}: cannot read a trace (a truncated or damaged .npz archive: {error})") from None
    except (OSError, ValueError, EOFError, RecursionError) as error:
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(f"{path}: cannot read a trace ({error})") from None
    if not isinstance(meta, dict):
        raise ConfigError(f"{path}: meta must be a JSON object")
    for name, values in arrays.items():
        if why := _not_numbers(name, values):
            raise ConfigError(f"{path}: trace: {why}")
    floats = {name: arrays[name].astype(np.float64) for name in ARRAYS if name != "offsets"}
    try:
        return Trace(offsets=arrays["offsets"].astype(np.int64), meta=meta, **floats)
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None


def _not_npz(head: bytes) -> str:
    """What a file that does not start as a zip archive is, from its first bytes."""
    if not head:
        what = "the file is empty"
    elif head.startswith(NPY):
        what = "it is a single .npy array"
    elif all(32 <= byte < 127 or byte in b"\t\r\n" for byte in head):
        what = "it is text (a CSV or JSON file?)"
    else:
        what = "it is not a zip archive"
    return f"{what}; a trace is a NumPy .npz archive (fedsim.traces.Trace.save writes one)"


def _not_numbers(name: str, values: np.ndarray) -> str | None:
    """Why ``values`` cannot be the trace's array ``name``: not numbers (strings, objects, booleans, complex),
    or, for ``offsets``, not whole numbers; None when they can."""
    kind = values.dtype.kind
    held = f"{KINDS.get(kind, 'values')} ({values.dtype})"
    if name == "offsets":
        whole = kind in "iu" or (kind == "f" and bool(np.all(np.isfinite(values) & (values == np.floor(values)))))
        return None if whole else f"offsets holds {held}, expected whole numbers (int64)"
    return None if kind in "iuf" else f"{name} holds {held}, expected numbers (float64)"
