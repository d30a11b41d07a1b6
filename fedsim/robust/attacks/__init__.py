"""The built-in attacks, registered when this package is imported (by :data:`fedsim.config.attack.ATTACKS` the
first time a run names an attack): model poisoning from each client's own update (sign flip, scaling, Gaussian
noise), from the round's honest updates (ALIE, IPM, min-max and min-sum, Fang et al.'s on trimmed mean and on
Krum), data poisoning (label flip, backdoor), and a lie about the loss alone (report_only)."""

from __future__ import annotations

from fedsim.config.attack import NoAttack, register_attack
from fedsim.robust.attack import AttackContext, ModelPoisoning
from fedsim.robust.attacks import alie, fang, gaussian, ipm, min_max, poison, report_only, scaling, tailored

BUILT_IN = (
    alie,
    fang,
    gaussian,
    ipm,
    min_max,
    scaling,
    poison,
    report_only,
    tailored,
)  # each registers its own attacks


@register_attack(NoAttack)
def honest(cfg: NoAttack, context: AttackContext) -> ModelPoisoning:
    return ModelPoisoning(cfg, context)
