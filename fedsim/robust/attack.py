"""Simulated adversaries as the first stage over client updates (DESIGN.md: attack, clip, compress, noise).

A ``fraction`` of the population is malicious, drawn once from the seed; a malicious client attacks in every
round it trains. The attack itself is a registered kind (:data:`fedsim.config.attack.ATTACKS`): a
:class:`ModelPoisoning` rewrites the malicious rows from their own updates (:meth:`ModelPoisoning.poison_`) or,
when its settings declare ``reads_honest`` (the papers' omniscient attacker: ALIE, IPM, min-max, Fang et
al.'s), writes its update from the round's honest ones (:meth:`ModelPoisoning.craft`, or
:meth:`ModelPoisoning.craft_each` where each attacker's differs). Those rows wait until every rank has trained:
:meth:`Attack.finish_` then combines the honest updates across ranks (one more all-reduce; their rows too when
the settings declare ``needs_rows``) and writes the malicious update into the sums and the gathered rows,
through the aggregation rule's per-client transform as any update goes, each attacker once. Data poisoning
(label flips, backdoors; :class:`DataPoisoning`) is in :mod:`fedsim.robust.attacks.poison`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from fedsim.config import ConfigError
from fedsim.config.attack import ATTACKS, AttackConfig
from fedsim.robust.gather import GatheredRows, Gatherer
from fedsim.robust.notes import Notes
from fedsim.robust.reported_loss import ReportedLoss

_CHANNEL = "attack.channel."  # an attacker's uplink state's tensors in a checkpoint
# the uplink compressor as the client pipeline calls it: clients, their rows (decoded in place), their states
Channel = Callable[[list[int], dict[str, Tensor], list[dict[str, Tensor]]], list[int | None]]

if TYPE_CHECKING:
    from fedsim.data.base import ClientData, FederatedDataset
    from fedsim.models.replica import Replica
    from fedsim.robust.aggregation import RobustAggregation
    from fedsim.tasks import Task

HONEST_ROWS_MB = 512  # honest rows an omniscient attacker reads, in memory before a memory-mapped file


@dataclass(frozen=True)
class AttackContext:
    """What an attack is built with: the run's seed, the population, the update's length, its device and whether
    this rank announces."""

    seed: int
    population: int
    numel: int
    device: torch.device
    announce: bool = False  # whether this rank says what the attack notes (rank 0)


@dataclass(frozen=True)
class HonestUpdates:
    """The round's honest updates, as an omniscient attacker reads them: ``moments`` (float64: their sum, sum
    of squares and count), ``rows`` (each one, in client order, when the settings declare ``needs_rows``),
    the round's ``survivors`` (clients that trained) and ``attackers`` among them."""

    moments: Tensor
    rows: Tensor | None
    survivors: int
    attackers: int

    @property
    def count(self) -> int:
        return int(self.moments[-1])

    @property
    def mean(self) -> Tensor:
        numel = (self.moments.numel() - 1) // 2
        return self.moments[:numel] / max(self.count, 1)

    @property
    def variance(self) -> Tensor:
        """Coordinate-wise, unbiased (n - 1 in the denominator), never negative."""
        numel, n = (self.moments.numel() - 1) // 2, self.count
        mean = self.mean
        return ((self.moments[numel:-1] - n * mean * mean) / max(n - 1, 1)).clamp_min(0)


class ModelPoisoning:
    """Base of a model-poisoning attack, built from its settings ``cfg`` and the run's ``context``: override
    :meth:`poison_` (each malicious update from its own), or, with settings that declare ``reads_honest``,
    :meth:`craft` (one update from the round's honest ones)."""

    def __init__(self, cfg: AttackConfig, context: AttackContext) -> None:
        self.cfg, self.context = cfg, context
        self.notes = Notes(getattr(context, "announce", False))  # what it says once on stderr (rank 0)

    def poison_(self, rows: Tensor, cids: Sequence[int], round_idx: int) -> None:
        """Rewrite the malicious clients' update rows (one per client of ``cids``) in place."""

    def craft(self, honest: HonestUpdates) -> Tensor:
        """The update (numel,) every malicious client of the round sends."""
        raise NotImplementedError(f"attack.kind={self.cfg.kind} reads the honest updates but has no craft()")

    def craft_each(self, honest: HonestUpdates, cids: Sequence[int], round_idx: int) -> Tensor:
        """(len(cids), numel): the update each malicious client of ``cids`` sends; by default every one sends
        :meth:`craft`'s. An attack whose clients differ (each its own random draw) overrides this, drawing from
        a stream keyed by the client, so that which rank a client trains on does not matter."""
        return self.craft(honest)[None].expand(len(cids), -1)


class DataPoisoning(ModelPoisoning):
    """Base of a data-poisoning attack: its malicious clients train on data it alters (:meth:`poison_data`), and
    their updates then go through :meth:`poison_` as any attacker's (unchanged unless overridden: a backdoor
    boosts them). Its settings declare ``poisons_data``. :meth:`success_test` gives the test inputs whose
    accuracy is the attack's success rate (a backdoor's triggered inputs), or None."""

    def poison_data(self, data: ClientData, cid: int, classes: int) -> ClientData:
        """Malicious client ``cid``'s training data as it trains on it (``classes``: the task's classes)."""
        raise NotImplementedError(f"attack.kind={self.cfg.kind} poisons data but has no poison_data()")

    def success_test(self, test: ClientData) -> ClientData | None:
        return None


class PoisonedData:
    """``dataset`` whose ``malicious`` clients' data ``poisoning`` alters; every other client's as it was."""

    def __init__(self, dataset: FederatedDataset, malicious: frozenset[int], poisoning: DataPoisoning) -> None:
        self.inner, self.malicious, self.poisoning = dataset, malicious, poisoning
        self.num_clients, self.num_classes = dataset.num_clients, dataset.num_classes
        self.input_shape, self.test = dataset.input_shape, dataset.test

    def n_samples(self, cid: int) -> int:
        return self.inner.n_samples(cid)

    def client(self, cid: int) -> ClientData:
        data = self.inner.client(cid)
        return self.poisoning.poison_data(data, cid, self.num_classes) if cid in self.malicious else data


_MALICIOUS = 0x4D41  # the stream beside the seed that picks the malicious clients


def malicious_clients(seed: int, population: int, fraction: float) -> frozenset[int]:
    """``round(fraction * population)`` clients, the same for a seed on every rank."""
    count = round(fraction * population)
    return frozenset(int(c) for c in np.random.default_rng([seed, _MALICIOUS]).choice(population, count, replace=False))


class Attack:
    """One run's attackers: :meth:`apply_` to each group's update rows, :meth:`finish_` after the rank's clients
    are trained, ``attackers`` the malicious clients of the round. ``spill`` is where the honest rows an
    attack reads go past their memory budget."""

    def __init__(self, cfg: AttackConfig, context: AttackContext, spill: Path) -> None:
        numel, device = context.numel, context.device
        self.cfg, self.seed, self.numel, self.device, self.spill = cfg, context.seed, numel, device, spill
        self.malicious = malicious_clients(context.seed, context.population, cfg.fraction)
        self.poisoning: ModelPoisoning = ATTACKS.build(cfg, context)
        self.reported_loss = ReportedLoss(cfg.reported_loss)  # what its clients say they trained to
        self.omniscient = type(cfg).reads_honest
        self.honest = torch.zeros(2 * numel + 1, dtype=torch.float64, device=device)  # sum, sum of squares, count
        self.honest_rows: GatheredRows | None = None  # each honest update, when the attack reads them
        self.pending: list[tuple[int, Tensor]] = []  # this rank's omniscient attackers: (client, weight)
        self.poisons_data = type(cfg).poisons_data
        self.backdoor_test: ClientData | None = None  # the rank's test shard, triggered (backdoor only)
        self.backdoor_success: float | None = None  # at the last evaluation
        self.attacks_seen = 0  # malicious client turns so far
        self.round_idx = 0
        self.attackers: list[int] = []  # the round's malicious clients that trained
        self.survivors = 0  # the round's clients that trained
        self.channel: dict[int, dict[str, Tensor]] = {}  # an omniscient attacker's own uplink state (its residual)

    def begin_round(self, round_idx: int, cohort: Sequence[int], dropped: set[int] | Sequence[int]) -> None:
        gone = set(dropped)
        trained = [c for c in cohort if c not in gone]
        self.round_idx, self.survivors = round_idx, len(trained)
        self.attackers = sorted(c for c in trained if c in self.malicious)
        self.attacks_seen += len(self.attackers)
        self.backdoor_success = None
        self.honest.zero_()
        self.pending = []
        self.honest_rows = None
        if self.omniscient and type(self.cfg).needs_rows and self.attackers:
            honest = [c for c in trained if c not in self.malicious]
            budget = HONEST_ROWS_MB * 2**20
            self.honest_rows = GatheredRows(honest, self.numel, budget, self.spill, self.device)

    def apply_(self, cids: Sequence[int], update: Tensor, weights: Tensor) -> None:
        """Rewrite the malicious clients' rows of ``update`` (K, numel) in place; count the honest ones."""
        bad = [k for k, cid in enumerate(cids) if cid in self.malicious]
        if self.omniscient:
            good = [k for k in range(len(cids)) if k not in bad]
            rows = update[good].double()
            self.honest[: self.numel] += rows.sum(0)
            self.honest[self.numel : -1] += (rows * rows).sum(0)
            self.honest[-1] += len(good)
            if self.honest_rows is not None:
                self.honest_rows.put_([cids[k] for k in good], update[good], weights[good])
            self.pending += [(cids[k], weights[k].clone()) for k in bad]
            update[bad] = 0.0  # written in finish_, once the honest updates are known
        elif bad:
            rows = update[bad]
            self.poisoning.poison_(rows, [cids[k] for k in bad], self.round_idx)
            update[bad] = rows

    def summed(self, cids: Sequence[int], coefficients: Tensor) -> Tensor:
        """The coefficients to sum the K rows by: an omniscient attacker's placeholder row counts 0, since
        :meth:`finish_` adds its real row (an aggregation rule's transform would otherwise turn the zero
        placeholder into a second, spurious update: centered clipping moves it to the centre)."""
        if not self.omniscient:
            return coefficients
        keep = torch.tensor([cid not in self.malicious for cid in cids], device=coefficients.device)
        return coefficients * keep.to(coefficients.dtype)

    def check_channel(self, stateful: bool, ranks: int) -> None:
        """An omniscient attacker keeps its compressor state (error feedback) on the rank that trained it, so a
        stateful uplink beside one is refused on several ranks, where another rank may train it next."""
        if self.omniscient and stateful and ranks > 1:
            raise ConfigError(
                f"attack.kind={self.cfg.kind} sends through an uplink compressor with error feedback, whose state"
                f" an attacker keeps on one rank: run it on one rank, not {ranks}, or use a compressor without memory"
            )

    def honest_updates(self) -> HonestUpdates:
        """The round's honest updates as the attack reads them (after :meth:`finish_`'s all-reduce)."""
        rows = self.honest_rows.rows if self.honest_rows is not None else None
        return HonestUpdates(self.honest, rows, self.survivors, len(self.attackers))

    def finish_(
        self,
        all_reduce: Callable[[Tensor], int],
        sums: Mapping[str, Tensor],
        robust: RobustAggregation | None,
        stages: Gatherer | None = None,
        uplink: Channel | None = None,
    ) -> int:
        """Write this rank's omniscient attackers' update (before the round's all-reduce) through the uplink
        compressor (``uplink``; each attacker with its own error-feedback state), the rule and into the rows the
        server stages gather, as any update goes; returns bytes moved. The attack crafts in the dense space,
        from the honest clients' updates before their compression (the papers' omniscient attacker); what it
        sends is only what the channel carries."""
        if not self.omniscient or not self.attackers:
            return 0
        moved = all_reduce(self.honest)
        if self.honest_rows is not None:
            moved += self.honest_rows.all_reduce_(all_reduce)
        cids = [cid for cid, _ in self.pending]
        crafted = self.poisoning.craft_each(self.honest_updates(), cids, self.round_idx)
        crafted = crafted.to(self.device, torch.float32).contiguous().clone()  # one row each, not a broadcast view
        if uplink is not None:  # decoded in place: what the server receives
            uplink(cids, {"delta": crafted}, [self.channel.setdefault(cid, {}) for cid in cids])
        self.honest_rows = None  # a spilled buffer's mapping goes with it
        for k, (cid, weight) in enumerate(self.pending):
            row = crafted[k].clone()[None]
            if robust is not None:  # through the rule as any update goes
                if robust.cfg.per_client:
                    robust.transform_(row)
                robust.gather_([cid], row, weight[None])
            if stages is not None:
                stages.gather_([cid], row, weight[None])
            sums["delta"].addcmul_(row[0], weight)
        return moved

    def reported(self, cids: Sequence[int], losses: Sequence[float], round_idx: int) -> list[float]:
        """Every rank's gathered reports of round ``round_idx`` (client ``cids[i]``'s true loss ``losses[i]``)
        as the clients make them: the malicious clients' as ``attack.reported_loss`` says
        (:mod:`fedsim.robust.reported_loss`)."""
        return self.reported_loss.rewrite(cids, losses, self.malicious, round_idx)

    # --------------------------------------------------------------------------------------- data, scores

    def poisoned(self, dataset: FederatedDataset, test_shard: ClientData) -> FederatedDataset:
        """``dataset`` with the malicious clients' data poisoned; for a backdoor, ``test_shard`` triggered."""
        if not isinstance(self.poisoning, DataPoisoning):
            raise ConfigError(
                f"attack.kind={self.cfg.kind} declares poisons_data, but its builder returns a"
                f" {type(self.poisoning).__name__}, not a DataPoisoning (fedsim.robust.attack)"
            )
        self.backdoor_test = self.poisoning.success_test(test_shard)
        return PoisonedData(dataset, self.malicious, self.poisoning)

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
        # the round's attackers by id, and how many (what a tracker plots)
        metrics: dict[str, object] = {"attackers": list(self.attackers), "malicious": len(self.attackers)}
        if self.backdoor_success is not None:
            metrics["backdoor_success"] = self.backdoor_success
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """The attack's count of malicious turns and the last backdoor score go on after a resume."""
        return {"malicious_turns": self.attacks_seen, "backdoor_success": self.backdoor_success}

    def tensors(self) -> dict[str, Tensor]:
        """Each omniscient attacker's uplink state (its error-feedback residual)."""
        return {
            f"{_CHANNEL}{cid}.{k}": t.to("cpu", copy=True) for cid, st in self.channel.items() for k, t in st.items()
        }

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor] | None = None) -> None:
        self.attacks_seen = int(state["malicious_turns"])
        self.backdoor_success = state["backdoor_success"]
        self.channel = {}
        for name, tensor in (tensors or {}).items():
            if name.startswith(_CHANNEL):
                cid, key = name[len(_CHANNEL) :].split(".", 1)
                self.channel.setdefault(int(cid), {})[key] = tensor.to(self.device).clone()

    def summary(self, compressed: bool = False) -> dict[str, object]:
        """summary.json's ``attack``; an omniscient attack says where it crafts (``channel``)."""
        fields: dict[str, object] = {
            **self.cfg.settings(),
            "malicious_clients": len(self.malicious),
            "malicious_turns": self.attacks_seen,
            "backdoor_success": self.backdoor_success,
        }
        if self.omniscient:
            fields["channel"] = (
                "crafted dense from the honest updates before compression; sent through the uplink compressor"
                if compressed
                else "crafted and sent dense (no uplink compressor)"
            )
        return fields
