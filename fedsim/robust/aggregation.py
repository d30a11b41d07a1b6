"""The aggregation stage of a round: a registered rule's per-client transform or its gathered rows, and the
rule's aggregate in place of the summed update (see :mod:`fedsim.robust`). :class:`Rule` is what a rule of
your own subclasses: a gathering rule (settings with ``gathers = True``) overrides :meth:`Rule.aggregate`, a
per-client one (``per_client = True``) :meth:`Rule.transform_` and, to keep memory of the last aggregate,
:meth:`Rule.observe_`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fedsim.comm.ledger import ByteLedger
from fedsim.config.robust import AGGREGATORS, AggregatorConfig, GatheringConfig
from fedsim.robust.gather import GatheredRows


class Rule:
    """One run's rule, built from its settings ``cfg`` for updates of ``numel`` entries on ``device``."""

    def __init__(self, cfg: AggregatorConfig, numel: int, device: torch.device) -> None:
        self.cfg, self.numel, self.device = cfg, numel, device

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


class RobustAggregation:
    """One run's aggregation rule: :meth:`transform_` each client's update (norm bound, centered clip) or
    :meth:`gather_` it; after the round's all-reduce, :meth:`aggregate_` puts the rule's result in the sums."""

    def __init__(self, cfg: AggregatorConfig, numel: int, device: torch.device, spill: Path, announce: bool) -> None:
        self.cfg, self.numel, self.device, self.spill, self.announce = cfg, numel, device, spill, announce
        self.rule: Rule = AGGREGATORS.build(cfg, numel, device)
        self.rows: GatheredRows | None = None
        self.round_idx = 0
        self.failures: list[dict[str, Any]] = []

    def begin_round(self, round_idx: int, cohort: Sequence[int], dropped: set[int] | Sequence[int]) -> None:
        self.round_idx = round_idx
        if isinstance(self.cfg, GatheringConfig):
            gone = set(dropped)
            survivors = [c for c in cohort if c not in gone]
            budget = int(self.cfg.memory_mb * 2**20)
            self.rows = GatheredRows(survivors, self.numel, budget, self.spill, self.device)

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
        return {"failures": list(self.failures)}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        self.failures = [dict(f) for f in state.get("failures", [])]
        self.rule.load_tensors(tensors)

    def tensors(self) -> dict[str, Tensor]:
        return {name: t.to("cpu", copy=True) for name, t in self.rule.tensors().items()}

    def summary(self) -> dict[str, Any]:
        return {**self.cfg.settings(), "failed_rounds": list(self.failures)}
