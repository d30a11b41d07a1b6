"""Gaussian noise in place of the update (Blanchard et al. 2017's Gaussian Byzantine worker): each malicious
client sends ``N(0, std^2)`` in every coordinate, drawn from a stream keyed by the seed, round and client."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field
from torch import Tensor

from fedsim.config.attack import AttackConfig, register_attack
from fedsim.robust.attack import ModelPoisoning
from fedsim.streams import noise_generator

_NOISE = 0x474E  # the stream beside the seed, round and client


class GaussianConfig(AttackConfig):
    kind: Literal["gaussian"] = "gaussian"
    std: float = Field(1.0, gt=0, le=1e6, description="standard deviation of the sent noise")


@register_attack(GaussianConfig)
class Gaussian(ModelPoisoning):
    cfg: GaussianConfig

    def poison_(self, rows: Tensor, cids: Sequence[int], round_idx: int) -> None:
        for row, cid in zip(rows, cids, strict=True):
            generator = noise_generator(row.device, self.context.seed, round_idx, _NOISE, cid)
            row.normal_(0.0, self.cfg.std, generator=generator)
