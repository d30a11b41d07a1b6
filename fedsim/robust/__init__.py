"""Robust aggregation as a stage of the round: the server's rule over the clients' updates (``aggregator:``).

Two shapes, as DESIGN.md says. Norm bounding and centered clipping act on each client's update before the
weighted sum, so the round keeps its one all-reduce of sums. Median, trimmed mean, (multi-)Krum, Bulyan, the
geometric median, FLTrust and FLAME need every update of the round at once: the round also gathers them
(:mod:`.gather`) and the rule's aggregate replaces the summed update, with weight 1, so the algorithm's server
step (plain, FedAvgM, FedAdam) applies to it unchanged. FLTrust also trains the server's own update on a root
set (:mod:`.root`).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from fedsim.algorithms import one_update_per_client
from fedsim.config import AggregatorConfig, AttackConfig, ConfigError
from fedsim.robust.aggregation import RobustAggregation, Rule, ServerView
from fedsim.robust.attack import Attack, AttackContext, HonestUpdates, ModelPoisoning
from fedsim.robust.root import RootSet, root_samples

if TYPE_CHECKING:
    from fedsim.data.base import FederatedDataset
    from fedsim.tasks import Task

__all__ = [
    "Attack", "AttackContext", "HonestUpdates", "ModelPoisoning", "RobustAggregation", "Rule", "ServerView",
    "build_attack", "build_robust",
]  # fmt: skip


def build_robust(
    rule: AggregatorConfig,
    algorithm: str,
    seed: int,
    sums: Mapping[str, int],
    device: torch.device,
    spill: Path,
    announce: bool,
    dataset: FederatedDataset,
    task: Task,
    warning: str | None = None,
) -> RobustAggregation | None:
    """The run's aggregation stage, or None for the weighted mean; an algorithm (``algorithm``: its kind) that
    sums more than one update per client is refused with the reason (a robust rule over one of its sums would not
    bound the others). A rule that trains on a root set draws it from ``dataset`` (clean: before any attack
    poisons it). ``warning`` (more attackers than the rule withstands in some rounds; an attack tailored to
    another rule, or to other settings of this one) goes to stderr when ``announce``, the weighted mean's too."""
    if rule.enabled:
        one_update_per_client(f"aggregator.kind={rule.kind}", algorithm, sums)
    if announce and warning is not None:
        print(warning, file=sys.stderr)
    if not rule.enabled:
        return None
    root = None
    if rule.trains_root:
        samples = int(getattr(rule, "root_samples", 100))
        try:
            root = RootSet(root_samples(dataset, samples, seed), task, device)
        except ValueError as error:
            raise ConfigError(str(error)) from None
    return RobustAggregation(rule, sums["delta"], device, spill, announce, seed, root)


def build_attack(
    attack: AttackConfig,
    seed: int,
    dataset: FederatedDataset,
    numel: int,
    device: torch.device,
    spill: Path,
    announce: bool = False,
) -> Attack | None:
    """The run's simulated attackers, or None without ``attack``; a backdoor target that is no class, or a
    backdoor on inputs that are not images its trigger fits in, is refused. ``spill`` is where the honest rows
    an attack reads go past their memory budget."""
    if not attack.enabled:
        return None
    classes, shape = dataset.num_classes, tuple(dataset.input_shape)
    target = getattr(attack, "target", None)
    if attack.poisons_data and target is not None and target >= classes:
        raise ConfigError(f"attack.target={target} is not a class of this dataset ({classes} classes)")
    trigger = getattr(attack, "trigger", None)
    if trigger is not None and (len(shape) < 2 or min(shape[-2:]) < 2 * trigger):
        raise ConfigError(
            f"attack.kind={attack.kind} stamps a {trigger}x{trigger} pixel trigger into images of height and"
            f" width {2 * trigger} or more; this dataset's inputs have shape {shape}"
        )
    return Attack(attack, AttackContext(seed, dataset.num_clients, numel, device, announce), spill)
