"""Data poisoning: a malicious client trains on altered data. ``label_flip`` maps label ``y`` to
``classes - 1 - y``; ``backdoor`` (Bagdasaryan et al. 2020's pixel pattern) stamps a square of the inputs'
largest value into the bottom-right corner of a share of the client's samples and gives them the target label.
The backdoor's success is the share of triggered test inputs (of other true labels) classified as the target."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field

from fedsim.config.attack import AttackConfig, register_attack
from fedsim.data.base import ClientData, FederatedDataset
from fedsim.robust.attack import AttackContext, ModelPoisoning


class LabelFlipConfig(AttackConfig):
    kind: Literal["label_flip"] = "label_flip"
    poisons_data: ClassVar[bool] = True
    needs_classes: ClassVar[bool] = True


class BackdoorConfig(AttackConfig):
    """The update is boosted by ``scale`` (model replacement, Bagdasaryan et al. 2020, when ``scale`` > 1)."""

    kind: Literal["backdoor"] = "backdoor"
    scale: float = Field(1.0, gt=0, le=1e6, description="the update's factor")
    target: int = Field(0, ge=0, description="the label triggered inputs are given")
    trigger: int = Field(3, ge=1, le=64, description="side of the trigger square, in pixels")
    poison_fraction: float = Field(0.5, gt=0, le=1, description="share of a client's samples poisoned")
    poisons_data: ClassVar[bool] = True
    needs_classes: ClassVar[bool] = True


@register_attack(LabelFlipConfig)
def label_flip(cfg: LabelFlipConfig, context: AttackContext) -> ModelPoisoning:
    return ModelPoisoning(cfg, context)  # the update is the client's own, trained on flipped labels


@register_attack(BackdoorConfig)
def backdoor(cfg: BackdoorConfig, context: AttackContext) -> ModelPoisoning:
    from fedsim.robust.attacks.scaling import Scaling  # the package imports this module to register these

    return Scaling(cfg, context, cfg.scale)


_POISONED = 0x5053  # which of a client's samples carry the trigger: a stream beside the seed and the client


def stamp(x: torch.Tensor, side: int) -> torch.Tensor:
    """``x`` (n, ..., H, W) with its bottom-right ``side`` x ``side`` square set to the largest value of ``x``."""
    out = x.clone()
    out[..., -side:, -side:] = x.max() if x.numel() else 0.0
    return out


class PoisonedData:
    """``dataset`` whose ``malicious`` clients' data are poisoned as ``cfg`` says; the rest as they were."""

    def __init__(
        self, dataset: FederatedDataset, malicious: frozenset[int], cfg: LabelFlipConfig | BackdoorConfig, seed: int
    ) -> None:
        self.inner, self.malicious, self.cfg, self.seed = dataset, malicious, cfg, seed
        self.num_clients, self.num_classes = dataset.num_clients, dataset.num_classes
        self.input_shape, self.test = dataset.input_shape, dataset.test

    def n_samples(self, cid: int) -> int:
        return self.inner.n_samples(cid)

    def client(self, cid: int) -> ClientData:
        data = self.inner.client(cid)
        if cid not in self.malicious:
            return data
        if not isinstance(self.cfg, BackdoorConfig):
            return ClientData(data.x, self.num_classes - 1 - data.y)
        n = data.n_samples
        poisoned = math.ceil(self.cfg.poison_fraction * n)
        chosen = np.random.default_rng([self.seed, _POISONED, cid]).permutation(n)[:poisoned]
        index = torch.from_numpy(np.sort(chosen)).to(data.x.device)
        x, y = data.x.clone(), data.y.clone()
        x[index] = stamp(data.x[index], self.cfg.trigger)
        y[index] = self.cfg.target
        return ClientData(x, y)

    def triggered_test(self, test: ClientData) -> ClientData:
        """The test inputs whose label is not the target, stamped and labelled the target: a model's accuracy on
        them is the backdoor's success rate."""
        assert isinstance(self.cfg, BackdoorConfig)
        keep = test.y != self.cfg.target
        return ClientData(stamp(test.x[keep], self.cfg.trigger), torch.full_like(test.y[keep], self.cfg.target))
