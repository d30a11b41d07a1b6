"""Robust aggregation as a stage of the round: the server's rule over the clients' updates (``aggregator:``).

Two shapes, as DESIGN.md says. Norm bounding and centered clipping act on each client's update before the
weighted sum, so the round keeps its one all-reduce of sums. Median, trimmed mean, (multi-)Krum, Bulyan and the
geometric median need every update of the round at once: the round also gathers them (:mod:`.gather`) and the
rule's aggregate replaces the summed update, with weight 1, so the algorithm's server step (plain, FedAvgM,
FedAdam) applies to it unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from fedsim.algorithms import one_update_per_client
from fedsim.config import ConfigError, RunConfig
from fedsim.robust.aggregation import RobustAggregation, Rule
from fedsim.robust.attack import Attack, AttackContext, HonestUpdates, ModelPoisoning

__all__ = [
    "Attack", "AttackContext", "HonestUpdates", "ModelPoisoning", "RobustAggregation", "Rule", "build_attack",
    "build_robust",
]  # fmt: skip


def build_robust(
    cfg: RunConfig, sums: Mapping[str, int], device: torch.device, spill: Path, announce: bool
) -> RobustAggregation | None:
    """The run's aggregation stage, or None for the weighted mean; an algorithm that sums more than one update
    per client is refused with the reason (a robust rule over one of its sums would not bound the others)."""
    if cfg.aggregator.kind == "mean":
        return None
    one_update_per_client(f"aggregator.kind={cfg.aggregator.kind}", cfg.algorithm.name, sums)
    return RobustAggregation(cfg.aggregator, sums["delta"], device, spill, announce)


def build_attack(
    cfg: RunConfig, population: int, classes: int, numel: int, device: torch.device, spill: Path
) -> Attack | None:
    """The run's simulated attackers, or None without ``attack``; a backdoor target that is no class is refused.
    ``spill`` is where the honest rows an attack reads go past their memory budget."""
    if not cfg.attack.enabled:
        return None
    target = getattr(cfg.attack, "target", None)
    if cfg.attack.poisons_data and target is not None and target >= classes:
        raise ConfigError(f"attack.target={target} is not a class of this dataset ({classes} classes)")
    return Attack(cfg, population, numel, device, spill)
