"""The aggregation-tailored attacks of Shejwalkar and Houmansadr (NDSS 2021, "Manipulating the Byzantine"):
every malicious client sends ``mean + lambda * p``, the honest mean moved along a perturbation ``p`` (the
negated unit mean, the negated standard deviation or the negated sign, as in min-max), with ``lambda`` tuned to
the one rule the attacker knows the server runs (``against``):

- ``trimmed_mean`` and ``median``: ``lambda`` is searched to push the rule's output as far from the honest mean
  as it goes, ``||rule(malicious copies, honest) - mean||``; the authors' search halves its step from
  ``lambda_init`` and keeps a ``lambda`` whenever the distance grew from the last one tried;
- ``krum``, ``multi_krum`` and ``bulyan``: the largest ``lambda`` (the halving search of min-max) at which the
  rule still selects every malicious copy (Krum: its one pick is malicious). Against multi-Krum this is the
  authors' ``our_attack_mkrum`` (cifar10/release-fedsgd-alexnet-mkrum.ipynb, cell 15): the rule evaluated is
  the server's as the attacker knows it, ``selected`` updates (default the server's: ``n - f``, or with
  ``repeated`` ``n - 2f - 2``, the notebook's ``multi_krum``) picked at once or, ``repeated``, one Krum pick
  after another. The notebook starts at ``lambda = 3`` (its femnist twin at 20): set ``lambda_init``.

The rule's parameters are the attacker's knowledge, given here (``trim``; ``byzantine``, default the round's
attackers; ``selected``, ``repeated``) and declared (:meth:`TailoredConfig.assumed_rule`): a run whose server
runs another rule, or the named one with other settings, is warned when it is built (``fedsim run --plan``
too). The crafted update is then sent as any, through the uplink compressor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.config.attack import AssumedRule, AttackConfig, register_attack
from fedsim.robust.attack import HonestUpdates, ModelPoisoning
from fedsim.robust.attacks.min_max import halving_search, perturbation, squared_distances
from fedsim.robust.bulyan import bulyan_selection
from fedsim.robust.krum import krum_selection, multi_krum_picks, multi_krum_selection
from fedsim.robust.median import median_of
from fedsim.robust.trimmed_mean import trimmed_mean_of

Against = Literal["trimmed_mean", "median", "krum", "multi_krum", "bulyan"]


class TailoredConfig(AttackConfig):
    kind: Literal["agr_tailored"] = "agr_tailored"
    against: Against = Field(description="the rule the attacker tailors its update to")
    perturbation: Literal["unit", "std", "sign"] = Field("unit", description="the direction the mean moves in")
    lambda_init: float = Field(10.0, gt=0, le=1e6, description="the search's first lambda")
    tolerance: float = Field(1e-5, gt=0, le=1, description="the search stops when lambda moves less")
    trim: float = Field(0.1, ge=0, lt=0.5, description="the trimmed mean's trim, as the attacker knows it")
    byzantine: int | None = Field(None, ge=0, description="Krum's and Bulyan's f; default the round's attackers")
    selected: int | None = Field(None, ge=1, description="multi-Krum's selected, as the attacker knows it")
    repeated: bool = Field(False, description="multi-Krum's picks one Krum after another, as the attacker knows")
    reads_honest: ClassVar[bool] = True
    needs_rows: ClassVar[bool] = True
    # each rule's settings (by the rule's own names) the attacker assumes; it evaluates every rule unweighted
    assumes: ClassVar[dict[str, tuple[str, ...]]] = {
        "trimmed_mean": ("trim", "weighted"),
        "median": (),
        "krum": ("byzantine",),
        "multi_krum": ("byzantine", "selected", "repeated", "weighted"),
        "bulyan": ("byzantine",),
    }
    from_round: ClassVar[frozenset[str]] = frozenset({"byzantine"})  # unset: the round says (its attackers)

    def assumed_rule(self) -> AssumedRule:
        known = self.model_dump() | {"weighted": False}
        names = self.assumes[self.against]
        settings = {k: known[k] for k in names if not (k in self.from_round and known[k] is None)}
        return AssumedRule("against", self.against, settings)


def distance_search(distance: Callable[[float], float], lambda_init: float, tolerance: float) -> float:
    """The authors' search for the trimmed mean and the median: min-max's halving search, where a ``lambda``
    succeeds when its distance grew from the previous one tried."""
    previous = [-1.0]

    def grew(lam: float) -> bool:
        loss = distance(lam)
        result, previous[0] = previous[0] < loss, loss
        return result

    return halving_search(grew, lambda_init, tolerance)


def tailored_update(rows: Tensor, attackers: int, cfg: TailoredConfig) -> Tensor:
    """(d,): ``mean + lambda p`` for the honest rows (n, d), float64, tailored to ``cfg.against``."""
    mean, p = rows.mean(0), perturbation(rows, cfg.perturbation)
    n, f = rows.shape[0], attackers if cfg.byzantine is None else cfg.byzantine

    def with_copies(lam: float) -> Tensor:  # the attackers' copies first, then the honest rows
        return torch.cat([(mean + lam * p)[None].expand(attackers, -1), rows])

    if cfg.against in ("trimmed_mean", "median"):

        def rule(all_rows: Tensor) -> Tensor:
            return trimmed_mean_of(all_rows, cfg.trim) if cfg.against == "trimmed_mean" else median_of(all_rows)

        def distance(lam: float) -> float:
            return float((rule(with_copies(lam)) - mean).norm())

        return mean + distance_search(distance, cfg.lambda_init, cfg.tolerance) * p

    picks = min(multi_krum_picks(n + attackers, f, cfg.selected, cfg.repeated), n + attackers)

    def selected(lam: float) -> bool:
        distances = squared_distances(with_copies(lam))
        if cfg.against == "krum":
            return krum_selection(distances, f, 1)[0] < attackers
        if cfg.against == "multi_krum":
            picked = multi_krum_selection(distances, f, picks, cfg.repeated)
        else:
            picked = bulyan_selection(distances, f)
        return all(k in picked for k in range(attackers))

    return mean + halving_search(selected, cfg.lambda_init, cfg.tolerance) * p


@register_attack(TailoredConfig)
class Tailored(ModelPoisoning):
    cfg: TailoredConfig

    def craft(self, honest: HonestUpdates) -> Tensor:
        assert honest.rows is not None
        return tailored_update(honest.rows.double(), honest.attackers, self.cfg).float()
