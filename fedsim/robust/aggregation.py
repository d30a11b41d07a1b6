"""The aggregation stage of a round: a registered rule's per-client transform or its gathered rows, and the
rule's aggregate in place of the summed update (see :mod:`fedsim.robust`). :class:`Rule` is what a rule of
your own subclasses: a gathering rule (settings with ``gathers = True``) overrides :meth:`Rule.aggregate`, a
per-client one (``per_client = True``) :meth:`Rule.transform_` and, to keep memory of the last aggregate,
:meth:`Rule.observe_`. Besides the rows, a rule reads :attr:`Rule.view` (:class:`ServerView`: the run's seed,
the round, the model the clients started from and, for a rule whose settings declare ``trains_root``, the
server's own update on its root set)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from fedsim.comm.ledger import ByteLedger
from fedsim.config.robust import AGGREGATORS, AggregatorConfig, GatheringConfig
from fedsim.robust.gather import GatheredRows
from fedsim.robust.notes import Notes

if TYPE_CHECKING:
    from fedsim.algorithms.base import RoundContext
    from fedsim.models.replica import Replica
    from fedsim.robust.root import RootSet


@dataclass(frozen=True)
class ServerView:
    """What the server knows of round ``round`` besides the updates: the run's ``seed``, the model ``start`` the
    clients started from (None before the first round) and ``reference``, the server's own update on its root
    set (FLTrust's; None unless the rule's settings declare ``trains_root``)."""

    seed: int
    round: int
    start: Tensor | None = None
    reference: Tensor | None = None


class Rule:
    """One run's rule, built from its settings ``cfg`` for updates of ``numel`` entries on ``device``."""

    def __init__(self, cfg: AggregatorConfig, numel: int, device: torch.device) -> None:
        self.cfg, self.numel, self.device = cfg, numel, device
        self.view = ServerView(0, 0)  # the round's, set before the rule aggregates
        self.notes = Notes()  # what the rule says once on stderr (where the run announces)

    def transform_(self, update: Tensor) -> None:
        """A per-client rule: rewrite K decoded update rows (K, numel) in place before they are summed."""

    def aggregate(self, rows: GatheredRows) -> Tensor:
        """A gathering rule: the aggregate (numel,) of the round's rows (``rows.rows``, ``rows.weights``)."""
        raise NotImplementedError(f"aggregator.kind={self.cfg.kind} gathers rows but has no aggregate()")

    def observe_(self, mean: Tensor) -> None:
        """A per-client rule: the round's weighted mean of the transformed updates, after the all-reduce."""

    def tensors(self) -> dict[str, Tensor]:
        """Tensors a checkpoint keeps (names unique to the rule)."""
        return {}

    def load_tensors(self, tensors: Mapping[str, Tensor]) -> None:
        """Restore what :meth:`tensors` saved."""

    def report(self) -> dict[str, Any]:
        """What the run's summary says of the rule besides its settings (JSON; a checkpoint keeps it)."""
        return {}

    def load_report(self, report: Mapping[str, Any]) -> None:
        """Restore what :meth:`report` said."""


class RobustAggregation:
    """One run's aggregation rule: :meth:`transform_` each client's update (norm bound, centered clip) or
    :meth:`gather_` it; after the round's all-reduce, :meth:`aggregate_` puts the rule's result in the sums."""

    def __init__(
        self,
        cfg: AggregatorConfig,
        numel: int,
        device: torch.device,
        spill: Path,
        announce: bool,
        seed: int = 0,
        root: RootSet | None = None,
    ) -> None:
        self.cfg, self.numel, self.device, self.spill, self.announce = cfg, numel, device, spill, announce
        self.rule: Rule = AGGREGATORS.build(cfg, numel, device)
        self.rule.notes.announce = announce
        self.rows: GatheredRows | None = None
        self.round_idx, self.seed, self.root = 0, seed, root
        self.failures: list[dict[str, Any]] = []

    def begin_round(self, round_idx: int, cohort: Sequence[int], dropped: set[int] | Sequence[int]) -> None:
        self.round_idx = round_idx
        self.rule.view = ServerView(self.seed, round_idx)  # prepare_ adds the model and the root update
        if isinstance(self.cfg, GatheringConfig):
            gone = set(dropped)
            survivors = [c for c in cohort if c not in gone]
            budget = int(self.cfg.memory_mb * 2**20)
            self.rows = GatheredRows(survivors, self.numel, budget, self.spill, self.device)

    def prepare_(self, context: RoundContext, replica: Replica) -> None:
        """Before the rule aggregates round ``context.index``: its :class:`ServerView`, with the server's update
        on its root set trained on ``replica`` (which the clients have finished with) when the rule needs it."""
        reference = None if self.root is None else self.root.update(replica, context, self.seed)
        self.rule.view = ServerView(self.seed, context.index, context.start, reference)

    def transform_(self, update: Tensor) -> None:
        """The rule's transform of K clients' decoded update rows (K, numel), in place (a per-client rule's)."""
        self.rule.transform_(update)

    def gather_(self, cids: Sequence[int], update: Tensor, weights: Tensor) -> None:
        if self.rows is not None:
            self.rows.put_(cids, update, weights)

    def aggregate_(self, all_reduce: Callable[[Tensor], int], sums: Mapping[str, Tensor], ledger: ByteLedger) -> bool:
        """After the all-reduce of the sums: the rule's aggregate as ``sums`` (delta the aggregate, weight 1).
        Returns True when the round failed (fewer updates than the rule is defined for): the model stays."""
        if self.cfg.per_client:  # centered clipping: the next round clips around this round's mean
            if float(sums["weight"]) > 0:
                self.rule.observe_(sums["delta"] / sums["weight"])
            return False
        rows = self.rows
        if rows is None or rows.n == 0:
            return False
        ledger.record_moved(rows.all_reduce_(all_reduce))
        least = self.cfg.least_cohort()
        if rows.n < least:
            reason = f"{rows.n} updates, {self.cfg.kind} needs {least}"
            if (f := getattr(self.cfg, "byzantine", None)) is not None:
                reason = f"{rows.n} updates, {self.cfg.kind} with byzantine={f} needs {least}"
            self.failures.append({"round": self.round_idx, "reason": reason})
            if self.announce:
                print(f"fedsim: round {self.round_idx}: not aggregated, the model stays: {reason}", file=sys.stderr)
            return True
        sums["delta"].copy_(self.rule.aggregate(rows))
        sums["weight"].fill_(1.0)
        self.rows = None  # a spilled buffer's mapping goes with it
        return False

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint's metadata keeps (the centre goes with its tensors: :meth:`tensors`)."""
        return {"failures": list(self.failures), "rule": self.rule.report()}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        self.failures = [dict(f) for f in state.get("failures", [])]
        self.rule.load_report(state.get("rule", {}))
        self.rule.load_tensors(tensors)

    def tensors(self) -> dict[str, Tensor]:
        return {name: t.to("cpu", copy=True) for name, t in self.rule.tensors().items()}

    def summary(self) -> dict[str, Any]:
        return {**self.cfg.settings(), "failed_rounds": list(self.failures), **self.rule.report()}
