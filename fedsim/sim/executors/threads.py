"""How many intra-op threads a rank's torch uses, and why (the log and summary.json say which)."""

from __future__ import annotations

import os

import torch
from torch import Tensor, nn

from fedsim.cores import cores_per_rank, ranks_here
from fedsim.models.flops import forward_flops

SMALL_MODEL = 2_000_000  # parameters: below this, and below SMALL_STEP, a CPU rank trains fastest on one thread
SMALL_STEP = 1e8  # FLOPs of one local SGD step (forward and backward of a batch)


def step_flops(module: nn.Module, sample: Tensor, batch: int) -> float | None:
    """FLOPs of one local step: three times the forward of one ``sample`` (the backward costs about twice the
    forward) times the ``batch``, counted by :func:`fedsim.models.flops.forward_flops`; None when the model
    cannot be counted."""
    try:
        return 3.0 * forward_flops(module, sample) * batch
    except Exception:  # a model of one's own that the counter cannot follow: the parameter rule alone
        return None


def choose_threads(configured: int | None, params: int, cuda: bool, world: int, flops: float | None = None) -> str:
    """Set torch's intra-op threads and say why: ``threads`` when configured; one for a small model on CPU
    whose step is cheap (``flops`` below :data:`SMALL_STEP`: its kernels are too short to split across cores,
    more threads only add synchronisation, and on cores busy with other work they make a round 20-40x slower);
    else this machine's cores shared among its ranks."""
    local = ranks_here(world)
    share = cores_per_rank(world)
    cheap = flops is None or flops < SMALL_STEP
    if configured is not None:
        count, why = configured, "set by threads"
    elif not cuda and params < SMALL_MODEL and cheap:
        step = "" if flops is None else f", {flops / 1e6:.3g} MFLOP a step"
        count, why = 1, f"a small model ({params / 1e6:.2f}M parameters{step}) runs fastest on one thread per rank"
    else:
        big = f"{params / 1e6:.2f}M parameters"
        cost = f"{flops / 1e9:.3g} GFLOP a step" if flops is not None and not cheap else big
        count, why = share, f"{cost}: {os.cpu_count()} cores shared by {local} rank(s)"
    torch.set_num_threads(count)
    return f"threads: {count} per rank ({why}; `threads: N` chooses)"
