"""Where a run writes: its own directory, never one another run holds, and what ``overwrite`` clears of an
earlier run's there (only what fedsim writes)."""

from __future__ import annotations

import shutil
from pathlib import Path

from fedsim.config import ConfigError
from fedsim.config.saved import PROVIDED
from fedsim.sim.persist.interrupted import INTERRUPTED

__all__ = ["PROVIDED", "clear", "holds_run", "output_dir"]


def holds_run(directory: Path) -> bool:
    """A run was started in ``directory``: it holds the config.json every run writes first."""
    return (directory / "config.json").exists()


def output_dir(explicit: Path | None, name: str, overwrite: bool) -> Path:
    """Where a new run writes. ``--out DIR`` holding another run is refused unless ``--overwrite``; without
    ``--out`` each run gets its own ``out/NAME``, ``out/NAME-2``, ... so none replaces another."""
    if explicit is not None:
        if holds_run(explicit) and not overwrite:
            raise ConfigError(
                f"--out {explicit}: holds another run (config.json); pass --overwrite to replace it, "
                "`fedsim resume` to go on with it, or another --out"
            )
        return explicit
    base = Path("out") / name
    if overwrite or not holds_run(base):
        return base
    k = 2
    while holds_run(base.with_name(f"{name}-{k}")):
        k += 1
    return base.with_name(f"{name}-{k}")


RUN_FILES = (
    *("config.json", "summary.json", "model.safetensors", "checkpoints", "state", "adapters", "regions"),
    *("bottom.onnx", "bottom.tokenizer.json", ".adapters.old", ".adapters.tmp", ".regions.old", ".regions.tmp"),
    ".summary.json.tmp",
    INTERRUPTED,
    PROVIDED,
)


def clear(out: Path, overwrite: bool) -> None:
    """With ``--overwrite``, the earlier run's files go (its checkpoints must not be mistaken for this run's);
    only what fedsim writes, never anything else in the directory."""
    if not (overwrite and out.is_dir()):
        return
    for name in RUN_FILES:
        path = out / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
