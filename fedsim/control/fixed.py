"""A run's communication setting as configured (``control:``), read once: what every run has, controller or not.

With ``control.kind: none`` nothing runs in a round: a knob's ``start`` setting is applied when the run is built
(the uplink compressor's parameter, or the clients' ``local_steps``), and an SGD-step budget is a number of
rounds. SkewScout (:class:`fedsim.control.skewscout.Controller`) starts from the same setting and turns it.
"""

from __future__ import annotations

from typing import Any

from fedsim.comm.uplink import Uplink
from fedsim.config import AlgorithmConfig, ConfigError, ControlConfig
from fedsim.config.control import COMPRESSOR_KNOBS


def check_control(cfg: ControlConfig, algorithm: Any) -> None:
    """One ConfigError for a knob or budget ``algorithm`` (the built algorithm) cannot take."""
    knob = cfg.knob
    if knob is not None and knob.name == "tau":
        raise ConfigError("control.knob tau is the adapter sync period of split fine-tuning with regions")
    opt = getattr(algorithm, "cfg", None)
    if knob is not None and knob.name == "local_steps" and not hasattr(opt, "local_steps"):
        raise ConfigError(f"control.knob local_steps: algorithm {type(algorithm).__name__} has no local steps")
    steps_fixed = knob is None or knob.name in COMPRESSOR_KNOBS
    if cfg.budget_steps is not None and steps_fixed and getattr(opt, "local_steps", None) is None:
        raise ConfigError("control.budget_steps counts SGD steps: set a local_steps knob or algorithm.local_steps")


def configured_knob(cfg: ControlConfig, algorithm: Any, uplink: Uplink | None) -> float | None:
    """The knob's setting at the start (None without a knob), checked against ``algorithm`` and, for a
    compressor's knob, set in ``uplink``'s compressor: all a run does with ``control.kind: none``."""
    check_control(cfg, algorithm)
    value = start_value(cfg)
    if value is not None and uplink is not None and knob_name(cfg) in COMPRESSOR_KNOBS:
        uplink.compressor.set_knob(value)
    return value


def start_value(cfg: ControlConfig) -> float | None:
    """The knob's setting at the start (for the whole run with no controller); None without a knob."""
    return cfg.knob.rungs[cfg.knob.start_rung] if cfg.knob is not None else None


def knob_name(cfg: ControlConfig) -> str:
    return cfg.knob.name if cfg.knob is not None else "none"


def local_settings(algorithm: AlgorithmConfig, name: str, value: float | None) -> AlgorithmConfig:
    """Local training's settings: ``algorithm`` with a local_steps knob's ``value``, where that is the knob."""
    if value is None or name != "local_steps":
        return algorithm
    return algorithm.model_copy(update={"local_steps": int(value)})


def round_steps(algorithm: AlgorithmConfig, name: str, value: float | None) -> int:
    """The SGD steps a round counts against ``budget_steps``: the local_steps knob's, or the algorithm's."""
    steps = value if name == "local_steps" else algorithm.local_steps
    return int(steps or 0)
