"""Simulated adversaries as the first stage over client updates (DESIGN.md: attack, clip, compress, noise).

A ``fraction`` of the population is malicious, drawn once from the seed; a malicious client attacks in every
round it trains. Model poisoning rewrites its update row; ALIE and IPM need the round's honest updates (the
papers' omniscient attacker), so their clients' rows wait until every rank has trained: :meth:`finish_` then
combines the honest mean and spread across ranks (one more all-reduce) and writes the malicious update into
the sums and the gathered rows, through the aggregation rule's per-client transform as any update goes.
Data poisoning (label flips, backdoors) is in :mod:`fedsim.robust.poison`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from fedsim.config import RunConfig
from fedsim.config.attack import DATA_POISONING, OMNISCIENT
from fedsim.streams import noise_generator

if TYPE_CHECKING:
    from fedsim.data.base import ClientData, FederatedDataset
    from fedsim.models.replica import Replica
    from fedsim.robust.aggregation import RobustAggregation
    from fedsim.tasks import Task

_MALICIOUS, _NOISE = 0x4D41, 0x474E  # streams beside the seed (and the round and client)


def malicious_clients(seed: int, population: int, fraction: float) -> frozenset[int]:
    """``round(fraction * population)`` clients, the same for a seed on every rank."""
    count = round(fraction * population)
    return frozenset(int(c) for c in np.random.default_rng([seed, _MALICIOUS]).choice(population, count, replace=False))


def alie_z(n: int, malicious: int) -> float:
    """Baruch et al.'s ``z_max``: ``s = floor(n / 2 + 1) - m`` clients must be out-voted, so the malicious update
    may sit ``Phi^-1((n - s) / n)`` standard deviations from the mean without standing out."""
    s = math.floor(n / 2 + 1) - malicious
    return NormalDist().inv_cdf(min(max((n - s) / n, 0.5), 1 - 1e-9))


class Attack:
    """One run's model-poisoning attackers: :meth:`apply_` to each group's update rows, :meth:`finish_` after
    the rank's clients are trained, ``attackers`` the malicious clients of the round."""

    def __init__(self, cfg: RunConfig, population: int, numel: int, device: torch.device) -> None:
        self.cfg, self.seed, self.numel, self.device = cfg.attack, cfg.seed, numel, device
        self.malicious = malicious_clients(cfg.seed, population, cfg.attack.fraction)
        self.omniscient = cfg.attack.kind in OMNISCIENT
        self.honest = torch.zeros(2 * numel + 1, dtype=torch.float64, device=device)  # sum, sum of squares, count
        self.pending: list[tuple[int, Tensor]] = []  # this rank's omniscient attackers: (client, weight)
        self.poisons_data = cfg.attack.kind in DATA_POISONING
        self.backdoor_test: ClientData | None = None  # the rank's test shard, triggered (backdoor only)
        self.backdoor_success: float | None = None  # at the last evaluation
        self.attacks_seen = 0  # malicious client turns so far
        self.round_idx = 0
        self.attackers: list[int] = []  # the round's malicious clients that trained
        self.survivors = 0  # the round's clients that trained

    def begin_round(self, round_idx: int, cohort: Sequence[int], dropped: set[int] | Sequence[int]) -> None:
        gone = set(dropped)
        trained = [c for c in cohort if c not in gone]
        self.round_idx, self.survivors = round_idx, len(trained)
        self.attackers = sorted(c for c in trained if c in self.malicious)
        self.attacks_seen += len(self.attackers)
        self.backdoor_success = None
        self.honest.zero_()
        self.pending = []

    def apply_(self, cids: Sequence[int], update: Tensor, weights: Tensor) -> None:
        """Rewrite the malicious clients' rows of ``update`` (K, numel) in place; count the honest ones."""
        kind, bad = self.cfg.kind, [k for k, cid in enumerate(cids) if cid in self.malicious]
        if self.omniscient:
            good = [k for k in range(len(cids)) if k not in bad]
            rows = update[good].double()
            self.honest[: self.numel] += rows.sum(0)
            self.honest[self.numel : -1] += (rows * rows).sum(0)
            self.honest[-1] += len(good)
            self.pending += [(cids[k], weights[k].clone()) for k in bad]
        for k in bad:
            if kind == "sign_flip":
                update[k].mul_(-self.cfg.scale)
            elif kind in ("scale", "backdoor"):
                update[k].mul_(self.cfg.scale)
            elif kind == "gaussian":
                generator = noise_generator(update.device, self.seed, self.round_idx, _NOISE, cids[k])
                update[k].normal_(0.0, self.cfg.std, generator=generator)
            elif self.omniscient:
                update[k].zero_()  # written in finish_, once the honest updates are known

    def summed(self, cids: Sequence[int], coefficients: Tensor) -> Tensor:
        """The coefficients to sum the K rows by: an omniscient attacker's placeholder row counts 0, since
        :meth:`finish_` adds its real row (an aggregation rule's transform would otherwise turn the zero
        placeholder into a second, spurious update: centered clipping moves it to the centre)."""
        if not self.omniscient:
            return coefficients
        keep = torch.tensor([cid not in self.malicious for cid in cids], device=coefficients.device)
        return coefficients * keep.to(coefficients.dtype)

    def malicious_update(self, honest: Tensor) -> Tensor:
        """ALIE's or IPM's update from the honest updates' summed statistics (sum, sum of squares, count)."""
        n = float(honest[-1])
        mean = honest[: self.numel] / max(n, 1.0)
        if self.cfg.kind == "ipm":
            return (-self.cfg.epsilon * mean).float()
        variance = (honest[self.numel : -1] - n * mean * mean) / max(n - 1, 1.0)
        z = self.cfg.z if self.cfg.z is not None else alie_z(self.survivors, len(self.attackers))
        return (mean - z * variance.clamp_min(0).sqrt()).float()

    def finish_(
        self, all_reduce: Callable[[Tensor], int], sums: Mapping[str, Tensor], robust: RobustAggregation | None
    ) -> int:
        """Write this rank's omniscient attackers' update (before the round's all-reduce); returns bytes moved."""
        if not self.omniscient or not self.attackers:
            return 0
        moved = all_reduce(self.honest)
        vector = self.malicious_update(self.honest)
        for cid, weight in self.pending:
            row = vector.clone()[None]
            if robust is not None:
                robust.transform_(row)
                robust.gather_([cid], row, weight[None])
            sums["delta"].addcmul_(row[0], weight)
        return moved

    # --------------------------------------------------------------------------------------- data, scores

    def poisoned(self, dataset: FederatedDataset, test_shard: ClientData) -> FederatedDataset:
        """``dataset`` with the malicious clients' data poisoned; for a backdoor, ``test_shard`` triggered."""
        from fedsim.robust.poison import PoisonedData

        poisoned = PoisonedData(dataset, self.malicious, self.cfg, self.seed)
        if self.cfg.kind == "backdoor":
            self.backdoor_test = poisoned.triggered_test(test_shard)
        return poisoned

    def score_(
        self, replica: Replica, global_state: Tensor, batch: int, task: Task, all_reduce: Callable[[Tensor], int]
    ) -> int:
        """The backdoor's success rate now: the global model's accuracy on the triggered test inputs, each rank
        scoring its shard; returns bytes moved."""
        if self.backdoor_test is None:
            return 0
        from fedsim.tasks import evaluation_sums

        sums = evaluation_sums(replica, global_state, self.backdoor_test, batch, task)
        moved = all_reduce(sums)
        self.backdoor_success = task.result(sums).accuracy
        return moved

    def round_metrics(self) -> dict[str, object]:
        metrics: dict[str, object] = {"attackers": list(self.attackers)}
        if self.backdoor_success is not None:
            metrics["backdoor_success"] = self.backdoor_success
        return metrics

    def summary(self) -> dict[str, object]:
        return {
            **self.cfg.model_dump(),
            "malicious_clients": len(self.malicious),
            "malicious_turns": self.attacks_seen,
            "backdoor_success": self.backdoor_success,
        }
