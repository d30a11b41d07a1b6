"""The client's optimiser (``algorithm.client_optimizer``): each kind with its own settings, as the server's.

``sgd`` (torch.optim.SGD: ``momentum``, optionally Nesterov), ``adam`` or ``adamw`` (torch's, with ``betas`` and
``eps``; ``weight_decay`` is L2 for adam, decoupled for adamw), or ``eva`` (Zhang et al. 2023: SGD with
``momentum`` on gradients preconditioned by Kronecker vectors, :mod:`fedsim.algorithms.eva`). Its state
(momentum buffer, Adam's moments, Eva's vectors) starts from zero every round (``state: reset``, as most papers
do) or is kept per client in the state store (``client``). A setting of another kind is an unknown key.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from fedsim.config.base import Strict


class ClientOptimizerBase(Strict):
    fuses: ClassVar[bool] = False  # the fused executor steps it inside the backward, K clients at once
    kind: str
    weight_decay: float = Field(0.0, ge=0, description="L2 weight decay (adamw: decoupled)")
    state: Literal["reset", "client"] = Field("reset", description="client: kept per client between rounds")

    @property
    def stateless(self) -> bool:
        """Whether a step has no state at all (plain SGD): nothing to keep between steps or rounds."""
        return False

    @property
    def keeps_state(self) -> bool:
        """Whether clients carry this optimiser's state between rounds (there is state to carry)."""
        return self.state == "client" and not self.stateless

    @model_validator(mode="after")
    def _state_to_keep(self) -> ClientOptimizerBase:
        if self.state == "client" and self.stateless:
            raise ValueError(
                "client_optimizer.state=client keeps SGD momentum or Adam moments per client; plain SGD has none"
                " (set client_optimizer.momentum or client_optimizer.kind: adam)"
            )
        return self


class SgdClientOptimizer(ClientOptimizerBase):
    fuses: ClassVar[bool] = True
    kind: Literal["sgd"] = Field("sgd", description="plain SGD, with momentum where set")
    momentum: float = Field(0.0, ge=0, lt=1, description="heavy-ball momentum (0: none)")
    nesterov: bool = Field(False, description="Nesterov's momentum (needs momentum > 0)")

    @property
    def stateless(self) -> bool:
        return not self.momentum

    @model_validator(mode="after")
    def _nesterov_needs_momentum(self) -> SgdClientOptimizer:
        if self.nesterov and not self.momentum:
            raise ValueError("client_optimizer.nesterov needs client_optimizer.momentum > 0")
        return self


class AdamClientOptimizer(ClientOptimizerBase):
    kind: Literal["adam", "adamw"] = Field(description="adam, or adamw (decoupled weight decay)")
    betas: tuple[float, float] = Field((0.9, 0.999), description="the moment estimates' decay rates")
    eps: float = Field(1e-8, gt=0, description="added to the second moment's root")

    @field_validator("betas")
    @classmethod
    def _betas_in_range(cls, betas: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in betas):
            raise ValueError(f"betas must each be in [0, 1), got {list(betas)}")
        return betas


class EvaClientOptimizer(ClientOptimizerBase):
    kind: Literal["eva"]
    momentum: float = Field(0.0, ge=0, lt=1, description="SGD momentum of the preconditioned step")
    damping: float = Field(0.03, gt=0, description="Tikhonov damping of the Kronecker-vector curvature")
    kl_clip: float = Field(0.001, ge=0, description="KL clip of the preconditioned step; 0 = none")
    decay: float = Field(0.95, ge=0, lt=1, description="running-average weight of the old Kronecker vectors")


def _sgd_unless_named(value: Any) -> Any:
    return {"kind": "sgd", **value} if isinstance(value, dict) and "kind" not in value else value


ClientOptimizerConfig = Annotated[
    SgdClientOptimizer | AdamClientOptimizer | EvaClientOptimizer,
    Field(discriminator="kind"),
    BeforeValidator(_sgd_unless_named),
]
