"""Simulated adversaries (``attack:``): which clients lie, and how; each kind of attack registers its settings.

A kind's settings class subclasses :class:`AttackConfig` with ``kind: Literal["..."]`` and declares what the
round's compatibility checks need: ``reads_honest`` (it writes its update from the round's honest ones, so it
cannot run where they are masked or noised), ``poisons_data`` (its clients train on altered data); an attack
written for one aggregation rule says which, and the rule's settings it assumes (:meth:`AttackConfig.assumed_rule`),
so a run whose server runs another rule, or the same with other settings, is warned. The built-in kinds are in
:mod:`fedsim.robust.attacks`; :data:`ATTACKS` resolves ``attack.kind``.

Every kind also says what its clients report as their training loss (``reported_loss``, what a selector such
as power-of-choice or Oort reads): ``honest``, ``high``, ``low`` or your own function
(:mod:`fedsim.robust.reported_loss` defines them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

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
    reported_loss: str = Field(
        "honest",
        description="the training loss malicious clients report: honest, high, low, or your function"
        " (package.module:function or path/to/file.py:function) of (client, honest loss, round)",
    )

    @field_validator("reported_loss")
    @classmethod
    def _reported_loss(cls, value: str) -> str:
        if value in REPORTED_LOSSES or re.fullmatch(_FUNCTION, value):
            return value
        raise ValueError(
            f"{value[:80]!r} is not honest, high, low or a function (package.module:function or"
            " path/to/file.py:function)"
        )

    @model_validator(mode="after")
    def _complete(self) -> AttackConfig:
        if self.kind != "none" and self.fraction == 0:
            raise ValueError(f"attack.kind={self.kind} needs attack.fraction, the share of malicious clients")
        if self.kind == "none" and self.lies_about_loss:
            raise ValueError(
                f"attack.reported_loss={self.reported_loss} needs malicious clients: set attack.kind (report_only:"
                " they send honest updates and only lie about their loss) and attack.fraction"
            )
        return self

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    def assumed_rule(self) -> AssumedRule | None:
        """The aggregation rule this attack tailors its update to, or None for an attack written for no rule."""
        return None

    @property
    def lies_about_loss(self) -> bool:
        """Its clients report a loss other than the one they trained to: what a selector that reads the clients'
        reports (``reads_clients``) chooses by, and what the run store keeps as theirs."""
        return self.reported_loss != "honest"

    def settings(self) -> dict[str, object]:
        """The kind's settings; ``reported_loss`` only where the clients lie (honest is every attack's default)."""
        settings = super().settings()
        return settings if self.lies_about_loss else {k: v for k, v in settings.items() if k != "reported_loss"}


REPORTED_LOSSES = ("honest", "high", "low")
_FUNCTION = r"(?:[A-Za-z_][\w.]*|[^:]+\.py):[A-Za-z_][\w.]*"  # package.module:name or path/to/file.py:name


class NoAttack(AttackConfig):
    """Every client is honest."""

    kind: Literal["none"] = "none"


ATTACKS = Registry[AttackConfig](
    "attack", AttackConfig, builtin="fedsim.robust.attacks", default="none", decorator="register_attack"
)
register_attack = ATTACKS.register
