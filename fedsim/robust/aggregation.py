"""The aggregation stage of a round: a robust rule's per-client transform or its gathered rows, and the rule's
aggregate in place of the summed update (see :mod:`fedsim.robust`)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fedsim.comm.ledger import ByteLedger
from fedsim.config.robust import AggregatorConfig
from fedsim.robust.bulyan import bulyan
from fedsim.robust.clipping import centered_clip_, norm_bound_
from fedsim.robust.gather import GatheredRows
from fedsim.robust.geometric_median import geometric_median
from fedsim.robust.krum import multi_krum
from fedsim.robust.median import coordinate_median
from fedsim.robust.trimmed_mean import trimmed_mean


class RobustAggregation:
    """One run's aggregation rule: :meth:`transform_` each client's update (norm bound, centered clip) or
    :meth:`gather_` it; after the round's all-reduce, :meth:`aggregate_` puts the rule's result in the sums."""

    def __init__(self, cfg: AggregatorConfig, numel: int, device: torch.device, spill: Path, announce: bool) -> None:
        self.cfg, self.numel, self.device, self.spill, self.announce = cfg, numel, device, spill, announce
        self.centre = torch.zeros(numel, device=device)  # centered clipping: the previous round's aggregate
        self.rows: GatheredRows | None = None
        self.round_idx = 0
        self.failures: list[dict[str, Any]] = []

    def begin_round(self, round_idx: int, cohort: Sequence[int], dropped: set[int] | Sequence[int]) -> None:
        self.round_idx = round_idx
        if self.cfg.gathered:
            gone = set(dropped)
            survivors = [c for c in cohort if c not in gone]
            budget = int(self.cfg.memory_mb * 2**20)
            self.rows = GatheredRows(survivors, self.numel, budget, self.spill, self.device)

    def transform_(self, update: Tensor) -> None:
        """Norm bounding or centered clipping of K clients' update rows (K, numel), in place."""
        if self.cfg.kind == "norm_bound":
            norm_bound_(update, self.cfg.bound)
        elif self.cfg.kind == "centered_clip":
            centered_clip_(update, self.centre, self.cfg.radius)

    def gather_(self, cids: Sequence[int], update: Tensor, weights: Tensor) -> None:
        if self.rows is not None:
            self.rows.put_(cids, update, weights)

    def aggregate_(self, all_reduce: Callable[[Tensor], int], sums: Mapping[str, Tensor], ledger: ByteLedger) -> bool:
        """After the all-reduce of the sums: the rule's aggregate as ``sums`` (delta the aggregate, weight 1).
        Returns True when the round failed (fewer updates than the rule is defined for): the model stays."""
        if self.cfg.kind == "centered_clip":  # the next round clips around this round's mean
            if float(sums["weight"]) > 0:
                self.centre.copy_(sums["delta"] / sums["weight"])
            return False
        rows = self.rows
        if rows is None or rows.n == 0:
            return False
        ledger.record_moved(rows.all_reduce_(all_reduce))
        least = self.cfg.least_cohort()
        if rows.n < least:
            reason = f"{rows.n} updates, {self.cfg.kind} with byzantine={self.cfg.byzantine} needs {least}"
            self.failures.append({"round": self.round_idx, "reason": reason})
            if self.announce:
                print(f"fedsim: round {self.round_idx}: not aggregated, the model stays: {reason}", file=sys.stderr)
            return True
        sums["delta"].copy_(self.rule(rows))
        sums["weight"].fill_(1.0)
        self.rows = None  # a spilled buffer's mapping goes with it
        return False

    def rule(self, rows: GatheredRows) -> Tensor:
        cfg, f = self.cfg, self.cfg.byzantine
        if cfg.kind == "median":
            return coordinate_median(rows)
        if cfg.kind == "trimmed_mean":
            return trimmed_mean(rows, cfg.trim)
        if cfg.kind == "krum":
            return multi_krum(rows, f, 1)
        if cfg.kind == "multi_krum":
            return multi_krum(rows, f, cfg.selected or rows.n - f)
        if cfg.kind == "bulyan":
            return bulyan(rows, f)
        return geometric_median(rows, cfg.iterations, cfg.smoothing)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint's metadata keeps (the centre goes with its tensors: :meth:`tensors`)."""
        return {"failures": list(self.failures)}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        self.failures = [dict(f) for f in state.get("failures", [])]
        if "robust.centre" in tensors:
            self.centre.copy_(tensors["robust.centre"])

    def tensors(self) -> dict[str, Tensor]:
        return {"robust.centre": self.centre.to("cpu", copy=True)} if self.cfg.kind == "centered_clip" else {}

    def summary(self) -> dict[str, Any]:
        return {"kind": self.cfg.kind, **self.cfg.model_dump(exclude={"kind"}), "failed_rounds": list(self.failures)}
