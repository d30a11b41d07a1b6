"""K clients' adapters over one frozen base: the base runs once over all K clients' rows, each trained module
per client on its own rows.

An adapted model (LoRA, LoRA-FA, a new classification head: peft's ``get_peft_model``) is a large frozen base
with a few small trained modules inside it. The fused executor's stacked model (``vmap`` of ``functional_call``
over the K clients) already leaves the frozen parameters unbatched, shared by the K clients; but it runs the whole
forward under ``vmap``, and a Hugging Face model reads its attention mask's values to choose a kernel
(``padding_mask.all()``), which ``vmap`` cannot batch. Here the model runs unbatched over the K clients' batches
laid end to end, ``(K * B, ...)``, as the sequential executor runs it over one client's ``B``, and only the
modules that own trained parameters run under ``vmap``: their inputs are viewed as ``(K, B, ...)`` and each
client's rows meet that client's parameters (a LoRA ``B`` becomes one batched matmul). The frozen base's weights
are never stacked or copied per client, and its matmuls see ``K * B`` rows at once.

This needs the rest of the model to treat each sample alone, as any model whose loss is a mean of per-sample
losses does, except batch statistics (BatchNorm: such a model keeps the whole-model ``vmap``), and the trained
modules to be of a kind that takes the batch as its first dimension (:data:`ROW_WISE`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager

from torch import Tensor, nn
from torch.func import functional_call, vmap
from torch.nn.modules.batchnorm import _BatchNorm

# modules whose every input and output has the batch first and whose output for a sample reads that sample
# alone: a trained one of these runs per client on its rows
ROW_WISE = (nn.Linear, nn.Bilinear, nn.Embedding, nn.LayerNorm, nn.GroupNorm, nn.RMSNorm, nn.Conv1d, nn.Conv2d)


def trained_owners(module: nn.Module) -> list[tuple[str, nn.Module]] | None:
    """The modules that own ``module``'s trained parameters, by name, when it is a frozen base with trained
    modules in it that the shared-base forward can run per client; None when it is not (nothing frozen, a trained
    module of a kind not in :data:`ROW_WISE`, or batch statistics that would mix the K clients' rows)."""
    if all(p.requires_grad for p in module.parameters()):
        return None
    if any(isinstance(m, _BatchNorm) for m in module.modules()):
        return None
    owners = [
        (name, m) for name, m in module.named_modules() if any(p.requires_grad for p in m.parameters(recurse=False))
    ]
    if not owners or not all(isinstance(m, ROW_WISE) for _, m in owners):
        return None
    return owners


class _PerClient:
    """A trained module's forward over K clients' rows laid end to end: viewed as ``(K, B, ...)``, each client's
    rows through the module with that client's parameters. Its ``twin`` is the module with its own parameter
    table, so substituting the clients' parameters there leaves the model's module (whose forward this replaces)
    as it was."""

    def __init__(self, name: str, module: nn.Module) -> None:
        self.name = name
        self.twin = copy.copy(module)
        self.twin._parameters = dict(module._parameters)  # a parameter table of its own
        self.params: dict[str, Tensor] = {}  # this step's (K, *shape) parameters by local name
        self.rows = 0  # K * B: the rows every input must have
        self.k = 1
        self.forward = vmap(self._one, randomness="different")

    def _one(self, params: dict[str, Tensor], *args: Tensor) -> Tensor:
        out: Tensor = functional_call(self.twin, params, args)
        return out

    def __call__(self, *args: Tensor) -> Tensor:
        for a in args:
            if a.shape[:1] != (self.rows,):
                raise RuntimeError(
                    f"fused adapters: module {self.name!r} got an input of shape {list(a.shape)}, not the "
                    f"{self.rows} rows of the K clients' batches (the batch must come first)"
                )
        out: Tensor = self.forward(self.params, *(a.unflatten(0, (self.k, -1)) for a in args))
        return out.flatten(0, 1)


class SharedBaseForward:
    """``(params, x) -> logits``: K clients' ``(K, *shape)`` trained parameters by name and their ``(K, B, ...)``
    inputs in, their ``(K, B, ...)`` outputs out, the frozen base run once over the ``K * B`` rows; the same
    call as the executor's ``vmap`` of ``functional_call``."""

    def __init__(self, module: nn.Module, owners: list[tuple[str, nn.Module]]) -> None:
        self.module = module
        self.owners = [(m, _PerClient(name, m), f"{name}." if name else "") for name, m in owners]

    def __call__(self, params: dict[str, Tensor], x: Tensor) -> Tensor:
        k = x.shape[0]
        with self._per_client(params, k, k * x.shape[1]):
            out: Tensor = self.module(x.flatten(0, 1))
        return out.unflatten(0, (k, -1))

    @contextmanager
    def _per_client(self, params: dict[str, Tensor], k: int, rows: int) -> Iterator[None]:
        """Each trained module's forward replaced, for one call of the model, by its per-client one."""
        for module, per_client, prefix in self.owners:
            per_client.k, per_client.rows = k, rows
            per_client.params = {
                local: params[prefix + local] for local, p in module.named_parameters(recurse=False) if p.requires_grad
            }
            module.forward = per_client  # an instance attribute, undone below
        try:
            yield
        finally:
            for module, per_client, _ in self.owners:
                del module.forward
                per_client.params = {}
