"""CRAIG on the client: before local training, the client swaps its data for a weighted coreset of it.

The gradient proxy is CRAIG's: each sample's gradient of the loss with respect to the last linear layer at the
global model, ``[p - y, (p - y) h^T]`` for softmax output ``p``, one-hot label ``y`` and the layer's input ``h``,
from one forward pass without gradients. :func:`fedsim.data.craig.craig` picks the subset; the client keeps it
(indices, weights, how many of its turns it has served) in the store and chooses again after ``every`` of the
client's own turns: a client that trains one round in five keeps its subset for about ``5 every`` rounds.
The choice's forward pass is part of the client's turn, so its seconds count as client compute.
"""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedsim.algorithms.base import ClientState
from fedsim.config import ConfigError, CoresetConfig
from fedsim.data.base import ClientData
from fedsim.data.craig import craig
from fedsim.data.stratified import stratified_subset
from fedsim.models.replica import Replica

BATCH = 128  # samples per forward pass of the choice: at 1024 the activations leave the cache (2-3x slower on a CPU)


def last_linear(module: nn.Module) -> nn.Linear:
    """The model's last ``nn.Linear`` (its classifier), or a ConfigError saying CRAIG needs one."""
    layers = [m for m in module.modules() if isinstance(m, nn.Linear)]
    if not layers:
        raise ConfigError("coreset.kind=craig needs a model whose output comes from an nn.Linear classifier")
    return layers[-1]


def last_layer_gradients(module: nn.Module, data: ClientData) -> Tensor:
    """Each sample's cross-entropy gradient with respect to the last linear layer (bias, then weight)."""
    inputs: list[Tensor] = []
    handle = last_linear(module).register_forward_hook(lambda _m, args, _out: inputs.append(args[0].detach()))
    was_training = module.training
    module.eval()  # a forward pass that leaves normalisation statistics alone
    try:
        with torch.no_grad():
            logits = torch.cat([module(data.x[lo : lo + BATCH]) for lo in range(0, data.n_samples, BATCH)])
    finally:
        handle.remove()
        module.train(was_training)
    h = torch.cat(inputs).flatten(1)
    error = logits.softmax(dim=1) - F.one_hot(data.y, logits.shape[1]).to(logits.dtype)
    return torch.cat([error, (error[:, :, None] * h[:, None, :]).flatten(1)], dim=1)


class ClientCoreset:
    def __init__(self, cfg: CoresetConfig) -> None:
        self.cfg = cfg

    def subset(
        self, data: ClientData, replica: Replica, saved: ClientState, seed: int = 0
    ) -> tuple[ClientData, ClientState]:
        """The client's weighted subset for this turn, from ``saved`` while it has served fewer than ``every``
        turns, else chosen now: CRAIG's at the replica's (global) weights, or a stratified uniform one drawn from
        ``seed`` (the client's for this round); and the state to keep."""
        fresh = "turns" in saved and int(saved["turns"]) < self.cfg.every
        if fresh and int(saved["index"].max()) < data.n_samples:
            index, weight = saved["index"].to(data.y.device), saved["weight"].to(data.x.device)
            state = {**saved, "turns": saved["turns"] + 1}
        else:
            if data.y.dim() != 1 or data.y.is_floating_point():
                raise ConfigError("coreset.kind=craig chooses class by class: it needs integer class labels")
            if self.cfg.kind == "random":  # the baseline: no gradients, no forward pass
                index, weight = stratified_subset(data.y, self.cfg.fraction, seed)
            else:
                index, weight = craig(last_layer_gradients(replica.module, data), data.y, self.cfg.fraction)
            state = {"index": index, "weight": weight, "turns": torch.tensor(1)}
        return replace(data.take(index), weight=weight.to(data.x.dtype)), state
