"""How many attackers a round holds: malicious clients are ``round(fraction * population)`` of the population,
fixed by the seed; a round samples ``cohort`` clients (exactly, without replacement: a hypergeometric count of
attackers; or each client with probability ``cohort / population``: two binomial counts). The settings check
compares these with the most attackers a rule is built to withstand (:meth:`AggregatorConfig.tolerated`).

An attack written for one rule declares it and the settings it assumes (:meth:`AttackConfig.assumed_rule`); a run
whose server runs another rule, or that rule with other values of those settings, is warned (the attack then
tunes itself to a server that is not there)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, get_args

import numpy as np

POISSON_DRAWS = 20_000  # simulated Poisson rounds (fixed seed): the share is then good to about 0.5 points


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def hypergeometric_pmf(population: int, malicious: int, cohort: int, k: int) -> float:
    """P(k attackers among ``cohort`` clients drawn without replacement)."""
    if k < max(0, cohort - (population - malicious)) or k > min(malicious, cohort):
        return 0.0
    log = _log_comb(malicious, k) + _log_comb(population - malicious, cohort - k) - _log_comb(population, cohort)
    return math.exp(log)


def rounds_beyond(
    population: int, malicious: int, cohort: int, fixed: bool, tolerated: Callable[[int], int | None]
) -> tuple[float, float]:
    """The expected attackers in a round, and the share of rounds with more than ``tolerated(n)`` of their ``n``
    clients (0 where the rule states no number)."""
    expected = cohort * malicious / population
    if fixed:
        limit = tolerated(cohort)
        if limit is None:
            return expected, 0.0
        share = sum(hypergeometric_pmf(population, malicious, cohort, k) for k in range(limit + 1, cohort + 1))
        return expected, min(max(share, 0.0), 1.0)
    q = min(cohort / population, 1.0)
    rng = np.random.default_rng(0)
    bad = rng.binomial(malicious, q, POISSON_DRAWS)
    n = bad + rng.binomial(population - malicious, q, POISSON_DRAWS)
    limits = {int(size): tolerated(int(size)) for size in np.unique(n)}
    over = [limits[int(size)] is not None and b > limits[int(size)] for b, size in zip(bad, n, strict=True)]
    return expected, float(np.mean(over))


def _shown(value: Any) -> str:
    return "unset" if value is None else f"{value:g}" if isinstance(value, float) else str(value).lower()


def _retarget(attack: Any, assumed: Any, rule: Any) -> str:
    """How to tailor ``attack`` to the server's rule instead, where its setting takes that rule ('' if not)."""
    field = type(attack).model_fields.get(assumed.setting)
    takes = get_args(field.annotation) if field is not None else ()
    return f"; set attack.{assumed.setting}={rule.kind}" if rule.kind in takes else ""


def assumption_warnings(attack: Any, rule: Any) -> list[str]:
    """For ``attack`` (an AttackConfig) and the server's ``rule`` (an AggregatorConfig): a line for each way the
    rule differs from the one the attack declares it assumes (its kind, then each assumed setting the rule has)."""
    assumed = attack.assumed_rule() if attack.enabled else None
    if assumed is None:
        return []
    if rule.kind != assumed.kind:
        return [
            f"fedsim: warning: attack.{assumed.setting}={assumed.kind} tailors attack.kind={attack.kind} to"
            f" aggregator.kind={assumed.kind}; the server runs aggregator.kind={rule.kind}"
            + _retarget(attack, assumed, rule)
        ]
    lines = []
    for name, value in assumed.settings.items():
        if name not in type(rule).model_fields or (server := getattr(rule, name)) == value:
            continue
        fix = f"; set attack.{name}={_shown(server)}" if name in type(attack).model_fields else ""
        lines.append(
            f"fedsim: warning: attack.kind={attack.kind} assumes aggregator.{name}={_shown(value)}; the server runs"
            f" aggregator.{name}={_shown(server)}{fix}"
        )
    return lines


def attackers_warning(run: Any) -> str | None:
    """For ``run`` (a RunConfig) with attackers: one line when 1% or more of its rounds will hold more of them
    than its rule withstands; None otherwise."""
    rule, attack, population = run.aggregator, run.attack, run.data.clients
    if not attack.enabled or not rule.enabled:
        return None
    malicious = round(attack.fraction * population)
    fixed = run.sampling == "fixed"
    expected, share = rounds_beyond(population, malicious, run.cohort_size, fixed, rule.tolerated)
    limit = rule.tolerated(run.cohort_size)
    if limit is None or share < 0.01:
        return None
    return (
        f"fedsim: warning: attack.fraction={attack.fraction:g} of {population} clients: {share:.0%} of rounds of"
        f" {run.cohort_size} will hold more than the {limit} attackers aggregator.kind={rule.kind} withstands"
        f" ({expected:.3g} in an average round)"
    )
