"""Where a run writes: its own directory, never one another run holds."""

from __future__ import annotations

from pathlib import Path

from fedsim.config import ConfigError

__all__ = ["output_dir"]


def _started(directory: Path) -> bool:
    """A run was started in ``directory``: it holds the config.json every run writes first."""
    return (directory / "config.json").exists()


def output_dir(explicit: Path | None, name: str, overwrite: bool) -> Path:
    """Where a new run writes. ``--out DIR`` holding another run is refused unless ``--overwrite``; without
    ``--out`` each run gets its own ``out/NAME``, ``out/NAME-2``, ... so none replaces another."""
    if explicit is not None:
        if _started(explicit) and not overwrite:
            raise ConfigError(
                f"--out {explicit}: holds another run (config.json); pass --overwrite to replace it, "
                "`fedsim resume` to go on with it, or another --out"
            )
        return explicit
    base = Path("out") / name
    if overwrite or not _started(base):
        return base
    k = 2
    while _started(base.with_name(f"{name}-{k}")):
        k += 1
    return base.with_name(f"{name}-{k}")
