"""One model replica whose whole state lives in one flat tensor.

Parrot keeps one replica per device and loads every client into it; making the parameters (and float buffers
such as BatchNorm statistics) views of one contiguous vector turns "load the global model", "take the delta"
and "add to the local sum" into single tensor operations, and an SGD step into one ``add_``.
"""

from __future__ import annotations

from itertools import pairwise

import torch
from torch import Tensor, nn


class ReplicaError(ValueError):
    """A module that cannot be laid flat; the message names the parameter and what to do."""


def check_flattenable(module: nn.Module) -> None:
    """Refuse what a flat replica would silently change: integer, complex or sparse parameters, and distinct
    parameters that share memory (rebinding would untie them; tie weights by assigning one ``nn.Parameter``).
    Integer buffers (BatchNorm's batch count, position ids) stay on each replica and do not travel."""
    ranges: list[tuple[int, int, str]] = []  # byte ranges: already-flat parameters share storage, not bytes
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        if p.is_sparse or not p.is_floating_point():
            kind = f"{p.dtype}{' sparse' if p.is_sparse else ''}"
            raise ReplicaError(f"parameter {name!r} is {kind}: only dense float parameters can be laid flat")
        ranges.append((p.data_ptr(), p.data_ptr() + p.numel() * p.element_size(), name))
    ranges.sort()
    for (_, end, first), (start, _, second) in pairwise(ranges):
        if start < end:
            raise ReplicaError(
                f"parameters {first!r} and {second!r} share memory but are different nn.Parameters; tie them by "
                "assigning the same nn.Parameter to both modules"
            )


def flat_layout(module: nn.Module) -> tuple[list[Tensor], list[Tensor]]:
    """The tensors of a flat state vector, in its order: trainable parameters, then float buffers."""
    params: list[Tensor] = [p for p in module.parameters() if p.requires_grad]
    return params, [b for b in module.buffers() if b.is_floating_point()]


def load_flat(module: nn.Module, flat: Tensor) -> nn.Module:
    """Copy a flat state vector (a run's ``model.safetensors``) into ``module``'s own tensors, in place; a
    length that is not the module's is :class:`ReplicaError` naming both."""
    params, buffers = flat_layout(module)
    tensors = params + buffers
    total = sum(t.numel() for t in tensors)
    if flat.dim() != 1 or flat.numel() != total:
        raise ReplicaError(
            f"the saved model holds {flat.numel()} values; this module's parameters and float buffers {total}: "
            "not the model the run trained"
        )
    offset = 0
    with torch.no_grad():
        for t in tensors:
            t.copy_(flat[offset : offset + t.numel()].view_as(t))
            offset += t.numel()
    return module


class Replica:
    """A module rebound onto ``flat``: ``flat[:n_params]`` are parameters, the rest float buffers.

    ``grad`` (length ``n_params``) holds every parameter's ``.grad`` as a view: :meth:`take_gradients` writes
    :meth:`gradients`' result there for a step that reads the flat gradient. Gradients are never accumulated
    by ``backward`` into it: zeroing and adding cost a pass each per step.
    """

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        check_flattenable(module)
        params, buffers = flat_layout(module)
        self.n_params = sum(p.numel() for p in params)
        self.n_buffers = sum(b.numel() for b in buffers)
        self.shapes = tuple(tuple(t.shape) for t in params + buffers)  # the flat vector's tensors, in order
        self.names = tuple(name for name, p in module.named_parameters() if p.requires_grad)  # params' names
        self.flat = torch.cat([t.detach().reshape(-1) for t in params + buffers]).float().contiguous()
        self.grad = torch.zeros(self.n_params, device=self.flat.device)
        self.params = self.flat[: self.n_params]
        self.trainable = tuple(params)
        offset = 0
        for p in params:
            n = p.numel()
            p.data = self.flat[offset : offset + n].view_as(p)
            p.grad = self.grad[offset : offset + n].view_as(p)
            offset += n
        # the same memory as plain tensors: stepped in place without autograd's leaf checks
        self.param_views = [p.detach() for p in params]
        self.grad_views = [g for p in params if (g := p.grad) is not None]
        for b in buffers:
            n = b.numel()
            b.data = self.flat[offset : offset + n].view_as(b)
            offset += n

    @property
    def parameters(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Each trained parameter's name and shape, in the flat vector's order."""
        return tuple(zip(self.names, self.shapes[: len(self.names)], strict=True))

    @property
    def numel(self) -> int:
        """Length of the flat state vector (parameters + float buffers)."""
        return self.n_params + self.n_buffers

    def load_(self, state: Tensor) -> None:
        """Copy a flat state vector into the replica, in place (no allocation)."""
        self.flat.copy_(state)

    def gradients(self, loss: Tensor) -> tuple[Tensor, ...]:
        """``loss``'s gradient per trainable parameter, as new tensors (zeros for one ``loss`` does not use);
        ``grad`` is left alone."""
        return torch.autograd.grad(loss, self.trainable, materialize_grads=True)

    def take_gradients(self, grads: tuple[Tensor, ...]) -> None:
        """Write ``grads`` (from :meth:`gradients`) into ``grad``, in place."""
        torch._foreach_copy_(self.grad_views, grads)
