"""Where a run writes: its own directory, never one another run holds, and what ``overwrite`` clears of an
earlier run's there (only what fedsim writes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from fedsim.config import ConfigError
from fedsim.config.saved import PROVIDED
from fedsim.sim.persist.interrupted import INTERRUPTED

__all__ = ["PROVIDED", "clear", "held_by_another", "holds_run", "output_dir", "why_no_checkpoint"]


def holds_run(directory: Path) -> bool:
    """A run was started in ``directory``: it holds the config.json every run writes first."""
    return (directory / "config.json").exists()


def held_by_another(directory: Path, named: str, flag: str, overwrite: str, resume: str) -> str:
    """The one line that refuses a new run in ``directory``, which holds another (``named``: as the user named it,
    ``--out DIR``; ``flag``: ``--out``), with what will do: ``overwrite`` (how to replace it), another ``flag``,
    and ``resume`` (how to go on with it) only where it can: not a finished run, nor one without a checkpoint,
    whose line says why it has none."""
    other = f"another {flag}"
    if (directory / "summary.json").is_file():
        return f"{named}: holds a finished run (summary.json); {overwrite} to replace it, or {other}"
    if any(path.is_dir() for path in (directory / "checkpoints").glob("ckpt-*")):  # checkpoint.complete (torch)
        return f"{named}: holds another run (config.json); {overwrite} to replace it, {resume} to go on, or {other}"
    return (
        f"{named}: holds another run (config.json), with nothing to resume from ({why_no_checkpoint(directory)});"
        f" {overwrite} to replace it, or {other}"
    )


def why_no_checkpoint(directory: Path) -> str:
    """Why the run in ``directory`` has no checkpoint, as its config.json's ``checkpoint.every`` explains it."""
    try:
        every = json.loads((directory / "config.json").read_text())["checkpoint"]["every"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"none in {directory / 'checkpoints'}"
    if every == "auto":
        return (
            "it stopped before its first automatic checkpoint, after its second round, or its setup takes none:"
            " its stderr said so as it started"
        )
    if every == 0:
        return "checkpoint.every=0 checkpoints only a run stopped between rounds by Ctrl-C or SIGTERM"
    return f"it stopped before its first checkpoint, after round {every} (checkpoint.every={every})"


def output_dir(explicit: Path | None, name: str, overwrite: bool) -> Path:
    """Where a new run writes. ``--out DIR`` holding another run is refused unless ``--overwrite``; without
    ``--out`` each run gets its own ``out/NAME``, ``out/NAME-2``, ... so none replaces another."""
    if explicit is not None:
        if holds_run(explicit) and not overwrite:
            resume = f"`fedsim resume {explicit}`"
            raise ConfigError(held_by_another(explicit, f"--out {explicit}", "--out", "pass --overwrite", resume))
        return explicit
    base = Path("out") / name
    if overwrite or not holds_run(base):
        return base
    k = 2
    while holds_run(base.with_name(f"{name}-{k}")):
        k += 1
    return base.with_name(f"{name}-{k}")


RUN_FILES = (
    *("config.json", "summary.json", "model.safetensors", "checkpoints", "state", "adapters", "adapter", "regions"),
    *("bottom.onnx", "bottom.tokenizer.json", ".adapters.old", ".adapters.tmp", ".regions.old", ".regions.tmp"),
    ".adapter.tmp",
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
