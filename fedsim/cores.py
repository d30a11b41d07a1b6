"""How many of this machine's cores one rank may use."""

from __future__ import annotations

import os


def cores_per_rank(world: int = 1) -> int:
    """This machine's cores shared among the ranks on it: torchrun's ``LOCAL_WORLD_SIZE``, else ``world``."""
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    return max(1, (os.cpu_count() or 1) // local)
