"""Simulated adversaries (``attack:``): which clients lie, and how; each kind of attack registers its settings.

A kind's settings class subclasses :class:`AttackConfig` with ``kind: Literal["..."]`` and declares what the
round's compatibility checks need: ``reads_honest`` (it writes its update from the round's honest ones, so it
cannot run where they are masked or noised), ``poisons_data`` (its clients train on altered data); an attack
written for one aggregation rule says which, and the rule's settings it assumes (:meth:`AttackConfig.assumed_rule`),
so a run whose server runs another rule, or the same with other settings, is warned. The built-in kinds are in
:mod:`fedsim.robust.attacks`; :data:`ATTACKS` resolves ``attack.kind``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from fedsim.config.registry import Registry, StageConfig


@dataclass(frozen=True)
class AssumedRule:
    """The aggregation rule an attack is written for: its ``kind`` (as ``aggregator.kind`` names it), named in the
    attack's own setting ``setting``, and the rule's ``settings`` the attacker assumes, by the names the rule's
    settings class gives them (``aggregator.<name>``); a setting the attack leaves to the round is left out."""

    setting: str
    kind: str
    settings: dict[str, Any] = field(default_factory=dict)


class AttackConfig(StageConfig):
    """A ``fraction`` of the population, fixed by the seed, attacks every round it is sampled in."""

    fraction: float = Field(0.0, ge=0, lt=1, description="share of the population that is malicious")
    reads_honest: ClassVar[bool] = False  # omniscient: its update is written from the round's honest updates
    needs_rows: ClassVar[bool] = False  # ... from each honest update, not only their mean and spread
    poisons_data: ClassVar[bool] = False  # its clients train on altered data
    needs_classes: ClassVar[bool] = False  # it rewrites class labels: a classification task only

    @model_validator(mode="after")
    def _complete(self) -> AttackConfig:
        if self.kind != "none" and self.fraction == 0:
            raise ValueError(f"attack.kind={self.kind} needs attack.fraction, the share of malicious clients")
        return self

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    def assumed_rule(self) -> AssumedRule | None:
        """The aggregation rule this attack tailors its update to, or None for an attack written for no rule."""
        return None


class NoAttack(AttackConfig):
    """Every client is honest."""

    kind: Literal["none"] = "none"


ATTACKS = Registry[AttackConfig](
    "attack", AttackConfig, builtin="fedsim.robust.attacks", default="none", decorator="register_attack"
)
register_attack = ATTACKS.register
