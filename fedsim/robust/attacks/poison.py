"""Data poisoning: a malicious client trains on altered data (:class:`fedsim.robust.attack.DataPoisoning`).
``label_flip`` maps label ``y`` to ``classes - 1 - y``; ``backdoor`` (Bagdasaryan et al. 2020's pixel pattern)
stamps a square of the inputs' largest value into the bottom-right corner of a share of the client's samples
and gives them the target label, and boosts the update by ``scale``. The backdoor's success is the share of
triggered test inputs (of other true labels) classified as the target."""

from __future__ import annotations

import math
from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field

from fedsim.config.attack import AttackConfig, register_attack
from fedsim.data.base import ClientData
from fedsim.robust.attack import AttackContext, DataPoisoning
from fedsim.robust.attacks.scaling import Scaling


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
class LabelFlip(DataPoisoning):
    """The update is the client's own, trained on flipped labels."""

    def poison_data(self, data: ClientData, cid: int, classes: int) -> ClientData:
        return ClientData(data.x, classes - 1 - data.y)


_POISONED = 0x5053  # which of a client's samples carry the trigger: a stream beside the seed and the client


def stamp(x: torch.Tensor, side: int) -> torch.Tensor:
    """``x`` (n, ..., H, W) with its bottom-right ``side`` x ``side`` square set to the largest value of ``x``."""
    out = x.clone()
    out[..., -side:, -side:] = x.max() if x.numel() else 0.0
    return out


class Backdoor(Scaling, DataPoisoning):
    cfg: BackdoorConfig

    def poison_data(self, data: ClientData, cid: int, classes: int) -> ClientData:
        n, cfg = data.n_samples, self.cfg
        poisoned = math.ceil(cfg.poison_fraction * n)
        chosen = np.random.default_rng([self.context.seed, _POISONED, cid]).permutation(n)[:poisoned]
        index = torch.from_numpy(np.sort(chosen)).to(data.x.device)
        x, y = data.x.clone(), data.y.clone()
        x[index] = stamp(data.x[index], cfg.trigger)
        y[index] = cfg.target
        return ClientData(x, y)

    def success_test(self, test: ClientData) -> ClientData:
        """The test inputs whose label is not the target, stamped and labelled the target: a model's accuracy on
        them is the backdoor's success rate."""
        keep = test.y != self.cfg.target
        return ClientData(stamp(test.x[keep], self.cfg.trigger), torch.full_like(test.y[keep], self.cfg.target))


@register_attack(BackdoorConfig)
def backdoor(cfg: BackdoorConfig, context: AttackContext) -> Backdoor:
    return Backdoor(cfg, context, cfg.scale)
