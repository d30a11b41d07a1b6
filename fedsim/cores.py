"""How many of this machine's cores one rank may use, and the rank counts torchrun passes in the environment."""

from __future__ import annotations

import os

from fedsim.config.base import ConfigError


def env_count(name: str, default: int, least: int = 0) -> int:
    """The whole number torchrun (or :func:`fedsim.sim.runtime.pool.launch`) put in the environment variable ``name``
    (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``), ``default`` where it is unset; one that
    is not a whole number of at least ``least`` is a :class:`ConfigError` naming the variable and its value."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)  # surrounding whitespace is allowed, as int() allows it
    except ValueError:
        value = least - 1  # refused below, as a number out of range is
    if value < least:
        raise ConfigError(
            f"environment variable {name}={raw!r}: must be a whole number >= {least} (torchrun sets it; "
            f"unset it to run without torchrun)"
        )
    return value


def check_rank_env() -> None:
    """Read torchrun's four variables once, before a run starts, so one that is wrong stops it before any
    training: each a whole number (``WORLD_SIZE`` and ``LOCAL_WORLD_SIZE`` at least 1), and a rank below its
    world where both are set."""
    for rank, world in (("RANK", "WORLD_SIZE"), ("LOCAL_RANK", "LOCAL_WORLD_SIZE")):
        index = env_count(rank, 0)
        size = env_count(world, index + 1, least=1)  # unset: nothing to be below
        if index >= size:
            raise ConfigError(f"environment variables {rank}={index}, {world}={size}: a rank must be below its world")


def ranks_here(world: int = 1) -> int:
    """Ranks on this machine: torchrun's ``LOCAL_WORLD_SIZE``, else ``world``."""
    return env_count("LOCAL_WORLD_SIZE", world, least=1)


def cores_per_rank(world: int = 1) -> int:
    """This machine's cores shared among the ranks on it (:func:`ranks_here`)."""
    return max(1, (os.cpu_count() or 1) // ranks_here(world))
