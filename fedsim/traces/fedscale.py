"""FedScale's published device traces, read where a user has them (fedsim never downloads them).

FedScale (Lai et al., ICML 2022) ships two pickled dictionaries keyed by client id
(its docs/device_trace_format.md and fedscale/cloud/internal/client_metadata.py):

- ``client_device_capacity``: ``{id: {"computation": ms per sample of inference, "communication": kbit/s}}``
  (AI Benchmark's device speeds and MobiPerf's bandwidths). FedScale charges training at 3x the inference
  latency (its ``augmentation_factor``) and the one bandwidth for both directions, so here ``compute_s =
  3 * computation / 1000`` and ``uplink_bps = downlink_bps = 1000 * communication``;
- ``client_behave_trace``: ``{id: {"active": [s], "inactive": [s], "finish_time": s, ...}}``: the client is
  online from ``active[k]`` to ``inactive[k]``, repeating every ``finish_time``. A client with no behaviour
  entry is online throughout, as FedScale treats one.

Rows follow the capacity file's ids in ascending order. The pickles are read by an unpickler that builds only
dictionaries, lists, strings and numbers: a file that asks for anything else (code) is refused.
"""

from __future__ import annotations

import io
import pickle
import reprlib
from pathlib import Path
from typing import Any

import numpy as np

from fedsim.config import ConfigError
from fedsim.traces.format import Trace

AUGMENTATION = 3.0  # FedScale's training cost over its measured inference latency


class _DataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if not all(part.isidentifier() for part in f"{module}.{name}".split(".")):  # text read as a pickle's GLOBAL
            raise pickle.UnpicklingError("not a pickle (a text file, a CSV?)")
        raise pickle.UnpicklingError(f"refusing {module}.{name}: a trace holds only dictionaries and numbers")


def read_pickle(path: Path) -> dict[Any, Any]:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as error:
        raise ConfigError(f"{path}: cannot read FedScale's trace ({error})") from None
    if raw.startswith(b"PK"):
        raise ConfigError(
            f"{path}: cannot read FedScale's trace: it is a zip archive (a fedsim .npz trace? clock.trace.path reads"
            " those), not a pickle"
        )
    try:
        data = _DataOnly(io.BytesIO(raw)).load()
    except Exception as error:  # bytes that are not a pickle may raise any error as they unpickle (pickle's docs)
        said = " ".join(str(error).split())  # one line, whatever the unpickler said
        if not isinstance(error, pickle.UnpicklingError):  # EOFError: Ran out of input, ...
            said = f"{type(error).__name__}: {said}"
        raise ConfigError(f"{path}: cannot read FedScale's trace ({said})") from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{path}: expected FedScale's dictionary keyed by client id")
    return data


def load_fedscale(capacity: Path, behaviour: Path | None = None) -> Trace:
    devices = read_pickle(capacity)
    behave = read_pickle(behaviour) if behaviour is not None else {}
    ids = _ordered(devices, capacity)
    compute = np.array([_number(devices[c], "computation", c, capacity) for c in ids]) * AUGMENTATION / 1000.0
    rate = np.array([_number(devices[c], "communication", c, capacity) for c in ids]) * 1000.0
    periods: list[float] = []
    starts: list[float] = []
    ends: list[float] = []
    offsets = [0]
    for c in ids:
        entry = behave.get(c)
        if entry is None:
            period, on, off = 1.0, [0.0], [1.0]  # no behaviour: online throughout
        else:
            try:
                period = float(entry["finish_time"])
                on, off = [float(a) for a in entry["active"]], [float(b) for b in entry["inactive"]]
            except (KeyError, TypeError, ValueError, OverflowError) as error:
                raise ConfigError(
                    f"{behaviour}: client {reprlib.repr(c)} lacks numeric active, inactive or finish_time ({error})"
                ) from None
            if len(on) != len(off):
                raise ConfigError(
                    f"{behaviour}: client {reprlib.repr(c)} has {len(on)} active and {len(off)} inactive times"
                )
        pieces = sorted((a, min(b, period)) for a, b in zip(on, off, strict=True) if a < min(b, period))
        periods.append(period)
        for a, b in pieces:
            if starts and len(starts) > offsets[-1] and a <= ends[-1]:
                ends[-1] = max(ends[-1], b)  # touching or overlapping spans are one
            else:
                starts.append(a)
                ends.append(b)
        offsets.append(len(starts))
    files = [str(capacity)] + ([str(behaviour)] if behaviour is not None else [])
    meta = {"source": "fedscale", "synthetic": False, "files": files, "augmentation": AUGMENTATION}
    try:
        return Trace(
            compute_s=compute,
            uplink_bps=rate,
            downlink_bps=rate.copy(),
            period_s=np.array(periods),
            offsets=np.array(offsets, dtype=np.int64),
            starts=np.array(starts),
            ends=np.array(ends),
            meta=meta,
        )
    except ConfigError as error:
        raise ConfigError(f"{capacity}: {error}") from None


def _ordered(devices: dict[Any, Any], path: Path) -> list[Any]:
    """The client ids in ascending order (the trace's rows), or one line: ids that have no order."""
    try:
        return sorted(devices)
    except TypeError:
        kinds = sorted({type(c).__name__ for c in devices})
        said = f"mix {' and '.join(kinds)} keys" if len(kinds) > 1 else f"are {kinds[0]} keys"
        raise ConfigError(
            f"{path}: client ids {said}, which have no order for the trace's rows; FedScale's are all integers"
        ) from None


def _number(entry: Any, key: str, cid: Any, path: Path) -> float:
    """Client ``cid``'s ``entry[key]`` as a float, or one line naming the client and the key."""
    try:
        value = entry[key]
    except (KeyError, IndexError, TypeError):
        raise ConfigError(f"{path}: client {reprlib.repr(cid)} has no {key} (a mapping of its numbers)") from None
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError) as error:  # a string, a list; an int past a float's (10**400)
        raise ConfigError(
            f"{path}: client {reprlib.repr(cid)}'s {key} is not a number a float holds ({error})"
        ) from None
