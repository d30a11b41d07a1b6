"""fedsim: federated and edge-cloud simulation. ``fedsim.Simulation`` is the Python API (:mod:`fedsim.api`).

Importing the package loads nothing heavy (an edge device imports its config and wire modules without torch);
``Simulation`` (and the ``RoundResult`` its callbacks get) is loaded on first use, as are ``read_run`` (a run's
rounds as a pandas DataFrame, :func:`fedsim.tracking.history.read_run`) and ``RunInterrupted`` (what a run
stopped by Ctrl-C raises: a KeyboardInterrupt) and ``RunFailed`` (what a run that your own code failed partway
raises, marked failed).
"""

from __future__ import annotations

import gc
import sys
from typing import Any

__all__ = [
    "RoundResult",
    "RunFailed",
    "RunInterrupted",
    "Simulation",
    "__version__",
    "load_model",
    "load_torch",
    "read_run",
]


__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it): no importlib.metadata


def load_torch() -> None:
    """Import torch, the first time, with the cyclic garbage collector paused, then freeze the objects it made.

    Importing torch creates about a million objects; with the collector on, its full collections walk them
    again and again, and every later collection of a run walks them once more. Paused and frozen, a cold start
    of ``fedsim run`` loses about 0.17 s of 1.0 s (measured: bench/vs_flower.py's ``fedsim_import_s``). Torch's
    module objects live as long as the process, so freezing them loses nothing.
    """
    if "torch" in sys.modules:
        return
    gc.disable()
    try:
        import torch  # noqa: F401
    finally:
        gc.enable()
    gc.freeze()


def __getattr__(name: str) -> Any:
    if name in ("Simulation", "RoundResult", "load_model"):
        load_torch()
        from fedsim import api

        return getattr(api, name)
    if name == "RunInterrupted":  # what a stopped run raises: a KeyboardInterrupt naming how to go on
        from fedsim.sim.persist.interrupted import RunInterrupted

        return RunInterrupted
    if name == "RunFailed":  # what a run that code of your own failed partway raises: one line, the cause chained
        from fedsim.sim.persist.failed import RunFailed

        return RunFailed
    if name == "read_run":  # a run's rounds as a DataFrame: the run store and pandas, no torch
        from fedsim.tracking.history import read_run

        return read_run
    raise AttributeError(f"module 'fedsim' has no attribute {name!r}")
