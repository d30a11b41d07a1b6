"""fedsim: federated and edge-cloud simulation. ``fedsim.Simulation`` is the Python API (:mod:`fedsim.api`).

Importing the package loads nothing heavy (an edge device imports its config and wire modules without torch);
``Simulation`` (and the ``RoundResult`` its callbacks get) is loaded on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["RoundResult", "Simulation", "__version__", "load_model"]


__version__ = "0.1.0"  # the one place the version is written (pyproject.toml reads it): no importlib.metadata


def __getattr__(name: str) -> Any:
    if name in ("Simulation", "RoundResult", "load_model"):
        from fedsim import api

        return getattr(api, name)
    raise AttributeError(f"module 'fedsim' has no attribute {name!r}")
