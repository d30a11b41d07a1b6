"""One model stacked K times, as the fused executor trains K clients and the gossip engine differentiates K nodes:
which models and tasks stack, where each trained parameter lies in the flat vector, and each member's mean loss
over its (padded, masked) batch."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap
from torch.nn.modules.batchnorm import _NormBase

from fedsim.models.replica import Replica
from fedsim.sim.executors.shared_base import ROW_WISE, SharedBaseForward, trained_owners
from fedsim.tasks import Task

Layout = list[tuple[str, int, torch.Size]]  # parameter name, offset in the flat vector, shape
# K members' (K, *shape) trained parameters by name and their (K, B, ...) inputs -> their (K, B, ...) outputs
StackedForward = Callable[[dict[str, Tensor], Tensor], Tensor]
_KINDS = [kind.__name__ for kind in ROW_WISE]


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


def stacked_forward(module: nn.Module) -> StackedForward:
    """``module`` run for K members at once. An adapted frozen base runs once over the K members' rows with each
    trained module applied per member (:mod:`fedsim.sim.executors.shared_base`); any other model runs under
    ``vmap`` of ``functional_call``, frozen parameters unbatched. Either way each member draws its own dropout
    masks."""
    owners = trained_owners(module)
    if owners is not None:
        return SharedBaseForward(module, owners)
    forward: StackedForward = vmap(lambda params, x: functional_call(module, params, (x,)), randomness="different")
    return forward


def why_forward_not_stacked(replica: Replica, sample: Tensor) -> str | None:
    """Why the replica's model cannot run for K members at once (:func:`stacked_forward`), found by running it
    for two members on one ``sample`` (a batch of one input) in eval mode without gradients; None when it runs.
    A model that branches on its tensors' values under ``vmap`` (a Hugging Face model's attention mask) cannot,
    unless it is a frozen base whose trained modules run per member."""
    module, device = replica.module, replica.flat.device
    params = {
        name: replica.flat[o : o + shape.numel()].view(shape).expand(2, *shape)
        for name, o, shape in param_layout(module)
    }
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            stacked_forward(module)(params, sample[:1].to(device).expand(2, *sample[:1].shape))
    except RuntimeError as exc:
        first = str(exc).split(". ")[0].splitlines()[0]
        hint = (
            f"over a frozen base, train only modules of a kind that runs per client ({', '.join(_KINDS)}: LoRA and "
            "LoRA-FA adapters and a new head do, DoRA's magnitudes do not), or use executor.kind sequential"
            if not all(p.requires_grad for p in module.parameters())
            else "use executor.kind sequential"
        )
        return f"the model's forward cannot run for K clients at once ({first}): {hint}"
    finally:
        module.train(was_training)
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
