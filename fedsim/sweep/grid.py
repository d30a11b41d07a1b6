"""A sweep's runs: the grid expanded over its base run, and each run's seconds per round measured here."""

from __future__ import annotations

import copy
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedsim.config import ConfigError, load_tree, parse_config, validate
from fedsim.config.base import set_dotted
from fedsim.config.respell import SpellingNote, key_respelled
from fedsim.config.sweep import SweepConfig
from fedsim.runstore import sweep_member

if TYPE_CHECKING:
    from fedsim.sim.run.settings import EngineSettings


@dataclass(frozen=True)
class SweepRun:
    label: str  # the grid point, e.g. "name=fedprox,seed=1"
    cfg: EngineSettings  # a RunConfig, read as the builder reads it


def load_sweep(path: Path, overrides: list[str] | tuple[str, ...] = ()) -> tuple[SweepConfig, list[SweepRun]]:
    """Read a sweep file and expand its grid; a bad sweep, or a grid point that is not a valid run, is one
    ConfigError naming it."""
    cfg = validate(SweepConfig, load_tree(path, overrides))
    base: dict[str, Any] = {}
    if cfg.base is not None:
        base = load_tree(cfg.base if cfg.base.is_absolute() else path.parent / cfg.base)
    base = _merged(base, cfg.run)
    runs = []
    for i, point in enumerate(cfg.grid_points()):
        tree = copy.deepcopy(base)
        for key, value in point.items():
            key, value, note = key_respelled(key, value)
            if note is not None and i == 0:  # once a sweep, not once a grid point
                warnings.warn(note, SpellingNote, stacklevel=2)
            set_dotted(tree, key, copy.deepcopy(value), "grid.")
        label = ",".join(f"{key.rsplit('.', 1)[-1]}={_short(value)}" for key, value in point.items())
        tree["name"] = sweep_member(cfg.name, i, _safe(label))
        tree["progress"] = False
        try:
            runs.append(SweepRun(label, parse_config(tree)))
        except ConfigError as exc:
            raise ConfigError(f"grid point {i} ({label}): {exc}") from None
    return cfg, runs


def measure(run: EngineSettings, rounds: int) -> float:
    """The run's median seconds per round on this host: a throwaway copy trains a warm-up round and then
    ``rounds`` timed ones, writing only to a temporary directory."""
    from fedsim.api.launch import build_engine

    short = run.model_copy(update={"rounds": rounds + 1, "eval_every": 0})
    if run.checkpoint.every == "auto":  # its first checkpoint, written at once to be measured, is not a round's
        short = short.model_copy(update={"checkpoint": run.checkpoint.model_copy(update={"every": 0})})
    with tempfile.TemporaryDirectory() as tmp:
        engine = build_engine(short, Path(tmp) / "out", Path(tmp) / "runs.db", resume=False)
        seconds = []
        try:
            for r in range(rounds + 1):
                t0 = time.perf_counter()
                engine.run_round(r)
                seconds.append(time.perf_counter() - t0)
        finally:
            engine.close()
    return statistics.median(seconds[1:])


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _short(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("kind", value.get("name", "")) or "-".join(str(v) for v in value.values()))
    return str(value)


def _safe(label: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in label.replace(",", "_").replace("=", ""))
