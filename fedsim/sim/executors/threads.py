"""How many intra-op threads a rank's torch uses, and why (the log and summary.json say which)."""

from __future__ import annotations

import os

import torch

from fedsim.cores import cores_per_rank, ranks_here

SMALL_MODEL = 2_000_000  # parameters: below this a CPU rank trains fastest on one thread


def choose_threads(configured: int | None, params: int, cuda: bool, world: int) -> str:
    """Set torch's intra-op threads and say why: ``threads`` when configured; one for a small model on CPU
    (its kernels are too short to split across cores: more threads only add synchronisation, and on cores busy
    with other work they make a round 20-40x slower); else this machine's cores shared among its ranks."""
    local = ranks_here(world)
    share = cores_per_rank(world)
    if configured is not None:
        count, why = configured, "set by threads"
    elif not cuda and params < SMALL_MODEL:
        count, why = 1, f"a small model ({params / 1e6:.2f}M parameters) runs fastest on one thread per rank"
    else:
        count, why = share, f"{os.cpu_count()} cores shared by {local} rank(s)"
    torch.set_num_threads(count)
    return f"threads: {count} per rank ({why}; `threads: N` chooses)"
