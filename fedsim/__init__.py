"""fedsim: federated and edge-cloud simulation. ``fedsim.Simulation`` is the Python API (:mod:`fedsim.api`).

Importing the package loads nothing heavy (an edge device imports its config and wire modules without torch);
``Simulation`` is loaded on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Simulation"]


def __getattr__(name: str) -> Any:
    if name == "Simulation":
        from fedsim.api import Simulation

        return Simulation
    raise AttributeError(f"module 'fedsim' has no attribute {name!r}")
