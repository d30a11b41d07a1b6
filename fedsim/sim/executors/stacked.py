"""One model stacked K times, as the fused executor trains K clients and the gossip engine differentiates K nodes:
which models and tasks stack, where each trained parameter lies in the flat vector, and each member's mean loss
over its (padded, masked) batch."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _NormBase

from fedsim.models.replica import Replica
from fedsim.tasks import Task

Layout = list[tuple[str, int, torch.Size]]  # parameter name, offset in the flat vector, shape


def why_model_not_stacked(replica: Replica, task: Task) -> str | None:
    """Why this model and task cannot run K at a time as one stacked model, or None when they can."""
    if type(task).per_sample is Task.per_sample:
        return f"the task {task.name!r} has no per-sample loss (define Task.per_sample to fuse it)"
    recurrent = [type(m).__name__ for m in replica.module.modules() if isinstance(m, nn.RNNBase)]
    if recurrent:
        return f"recurrent layers ({recurrent[0]}) do not fuse"
    statistics = [m for m in replica.module.modules() if isinstance(m, _NormBase) and m.track_running_stats]
    if statistics:
        values = sum(b.numel() for m in statistics for b in m.buffers() if b.is_floating_point())
        return (
            f"the model has {values} float buffer values (BatchNorm statistics), which would be per "
            "client: use model.norm group or none"
        )
    return None


def param_layout(module: nn.Module) -> Layout:
    """The trained parameters in the flat vector's order (frozen ones are not in it: the module's own are used)."""
    layout: Layout = []
    offset = 0
    for name, p in module.named_parameters():
        if p.requires_grad:
            layout.append((name, offset, p.shape))
            offset += p.numel()
    return layout


def member_losses(task: Task, logits: Tensor, yb: Tensor, mb: Tensor) -> Tensor:
    """Each member's mean loss over its batch, ``(K, B, ...)`` logits against ``(K, B, ...)`` targets: each
    sample weighs its units, as the task's batch loss weighs them; padding rows (mask 0) weigh nothing."""
    flat_y = yb.flatten(0, 1)
    per_sample = task.per_sample(logits.flatten(0, 1), flat_y).view_as(mb)
    weight = mb if type(task).units is Task.units else task.units(flat_y).view_as(mb) * mb
    return (per_sample * weight).sum(1) / weight.sum(1).clamp_min(1.0)
