"""Scaled updates: ``sign_flip`` sends ``-scale * x`` for the client's own update ``x`` (a reversed gradient,
Damaskinos et al. 2018's sign flipping), ``scale`` sends ``scale * x`` (a boosted update, as in model
replacement, Bagdasaryan et al. 2020)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import Field, model_validator
from torch import Tensor

from fedsim.config.attack import AttackConfig, register_attack
from fedsim.robust.attack import AttackContext, ModelPoisoning


class SignFlipConfig(AttackConfig):
    kind: Literal["sign_flip"] = "sign_flip"
    scale: float = Field(1.0, gt=0, le=1e6, description="the sent update is -scale times the client's own")


class ScaleConfig(AttackConfig):
    kind: Literal["scale"] = "scale"
    scale: float = Field(1.0, gt=0, le=1e6, description="the sent update is scale times the client's own")

    @model_validator(mode="after")
    def _not_clean(self) -> ScaleConfig:
        if self.scale == 1:
            raise ValueError(
                "kind=scale at scale=1 sends each malicious client's own update: a clean run;"
                " set attack.scale (a boost, e.g. 10)"
            )
        return self


class Scaling(ModelPoisoning):
    """Multiplies each malicious update by ``factor``."""

    def __init__(self, cfg: AttackConfig, context: AttackContext, factor: float) -> None:
        super().__init__(cfg, context)
        self.factor = factor

    def poison_(self, rows: Tensor, cids: Sequence[int], round_idx: int) -> None:
        rows.mul_(self.factor)


@register_attack(SignFlipConfig)
def sign_flip(cfg: SignFlipConfig, context: AttackContext) -> Scaling:
    return Scaling(cfg, context, -cfg.scale)


@register_attack(ScaleConfig)
def scale(cfg: ScaleConfig, context: AttackContext) -> Scaling:
    return Scaling(cfg, context, cfg.scale)
