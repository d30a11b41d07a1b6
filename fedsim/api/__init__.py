"""fedsim's Python API: :class:`Simulation` runs a config from Python round by round (:mod:`fedsim.api.simulation`),
and :mod:`fedsim.api.launch` builds the engine a config calls for and runs it on one rank or several (what
``fedsim run`` does)."""

from __future__ import annotations

from fedsim.api.simulation import RoundResult, Simulation, global_model, load_model

__all__ = ["RoundResult", "Simulation", "global_model", "load_model"]
