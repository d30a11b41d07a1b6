"""Inner-product manipulation (Xie et al., UAI 2019): every malicious client sends ``-epsilon * mu``, the
negated mean of the round's honest updates scaled by ``epsilon``."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field
from torch import Tensor

from fedsim.config.attack import AttackConfig, register_attack
from fedsim.robust.attack import HonestUpdates, ModelPoisoning


class IpmConfig(AttackConfig):
    kind: Literal["ipm"] = "ipm"
    epsilon: float = Field(0.1, gt=0, le=1e6, description="the sent update is -epsilon times the honest mean")
    reads_honest: ClassVar[bool] = True


@register_attack(IpmConfig)
class Ipm(ModelPoisoning):
    cfg: IpmConfig

    def craft(self, honest: HonestUpdates) -> Tensor:
        return (-self.cfg.epsilon * honest.mean).float()
