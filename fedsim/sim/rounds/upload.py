"""What clients send after local training, written once over the K clients of a call (K = 1 sequentially).

Each client's update stays its own row until it has passed through the round's client stages, one ordered list
(:func:`client_pipeline`: attackers, the DP clip, the uplink compressor, local noise, a per-client rule,
SecAgg+'s mask), each stage a small object with the plan's name for it (:mod:`fedsim.sim.rounds.plan`) and one
``apply_`` over an :class:`Uploading`. The stages' own objects (the attack, DP, the uplink, the rule, SecAgg+)
keep their state and metrics; a stage here says where each acts. The list's last stage adds the rows into the
rank's local sum (:class:`SumBuffer`, one flat buffer of every quantity the algorithm sums, so a round needs one
collective), each with its coefficient (its aggregation weight, or 1), beside the clients' weights and count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor

from fedsim.algorithms.group import ClientUpdates
from fedsim.sim.state.state_store import ClientState

if TYPE_CHECKING:  # dp-accounting and the cryptography libraries load only in a private run
    from fedsim.privacy.dp import DifferentialPrivacy
    from fedsim.privacy.secagg import SecAggPlus
    from fedsim.robust import Attack, RobustAggregation
    from fedsim.robust.gather import Gatherer
    from fedsim.sim.rounds.coreset import ClientCoreset


# (clients, their update rows by segment (K, size), their uplink states): compress each client's rows in place,
# keeping what the compressor carries between rounds (an error-feedback residual) in its uplink state; returns
# each client's wire bytes (None: sent dense)
Compress = Callable[[list[int], dict[str, Tensor], list[dict[str, Tensor]]], list[int | None]]


@dataclass(frozen=True)
class UpdateStages:
    """The round's stages over client updates beyond the compressor, each None when the run has none: DP
    (clip, local noise), SecAgg+ (quantize, mask), the aggregation rule (norm bound or gather) and simulated
    attackers; and the one stage over a client's data before it trains, CRAIG's coreset."""

    privacy: DifferentialPrivacy | None = None
    secagg: SecAggPlus | None = None
    robust: RobustAggregation | None = None
    attack: Attack | None = None
    coreset: ClientCoreset | None = None
    server_stages: StageRows | None = None


class StageRows(Protocol):
    """What keeps each client's update row, and its part of every other sum, for the server stages."""

    removes_clients: bool  # a stage takes clients out: keep each one's part of every summed segment

    def gather_(self, cids: Sequence[int], update: Tensor, weights: Tensor) -> None: ...

    def keep_(self, cids: Sequence[int], parts: Mapping[str, Tensor]) -> None: ...


NO_STAGES = UpdateStages()


# ---------------------------------------------------------------- the client stages, in order
@dataclass
class Uploading:
    """One call's update rows on their way to the rank's sum."""

    cids: list[int]
    rows: dict[str, Tensor]  # (K, size) per segment, rewritten in place by the stages
    coefficients: dict[str, Tensor]  # (K,) per segment: each row's weight in the sum (and SecAgg+'s)
    uplinks: list[ClientState] | None  # the clients' compressor states, filled by the compressor
    round_idx: int
    local_sum: SumBuffer
    weights: Tensor | float = 0.0  # (K,) each client's aggregation weight (a float: the one client's)
    sent: list[int | None] = field(default_factory=list)  # each client's wire bytes; None: dense
    unclipped: Tensor | None = None  # the DP clip left each client alone (1) or not (0)
    summed: dict[str, Tensor] | None = None  # coefficients of the sum, where an attacker holds its row back


class ClientStage(Protocol):
    @property
    def stage(self) -> str:
        """Its name in the round's plan."""
        ...

    def apply_(self, up: Uploading) -> None: ...


@dataclass(frozen=True)
class AttackApply:
    attack: Attack
    stage: str = "attack"

    def apply_(self, up: Uploading) -> None:
        self.attack.apply_(up.cids, up.rows["delta"], up.coefficients["delta"])
        # an omniscient attacker's placeholder is not summed: attack.finish_ adds its row on the server
        up.summed = {**up.coefficients, "delta": self.attack.summed(up.cids, up.coefficients["delta"])}


@dataclass(frozen=True)
class DpClip:
    privacy: DifferentialPrivacy
    stage: str = "dp_clip"

    def apply_(self, up: Uploading) -> None:
        self.privacy.plant_(up.cids, up.rows)  # an audit's canaries send their direction instead
        up.unclipped = self.privacy.clip_(up.rows)
        up.local_sum.segments["unclipped"] += up.unclipped.sum()


@dataclass(frozen=True)
class UplinkCompress:
    compress: Compress
    stage: str = "uplink"

    def apply_(self, up: Uploading) -> None:
        if up.uplinks is not None:
            up.sent = self.compress(up.cids, up.rows, up.uplinks)


@dataclass(frozen=True)
class DpDecodedClip:
    privacy: DifferentialPrivacy
    stage: str = "dp_decoded_clip"

    def apply_(self, up: Uploading) -> None:
        if up.uplinks is not None:  # clip what the server decodes; error feedback keeps what is cut off
            self.privacy.clip_decoded_(up.rows, up.uplinks)


@dataclass(frozen=True)
class DpLocalNoise:
    privacy: DifferentialPrivacy
    stage: str = "dp_local_noise"

    def apply_(self, up: Uploading) -> None:
        self.privacy.local_noise_(up.round_idx, up.cids, up.rows)


@dataclass(frozen=True)
class RuleTransform:
    robust: RobustAggregation
    stage: str = "aggregator_transform"

    def apply_(self, up: Uploading) -> None:
        self.robust.transform_(up.rows["delta"])  # a server-side rule acts on what the server decodes


@dataclass(frozen=True)
class SecAggMask:
    secagg: SecAggPlus
    stage: str = "secagg_mask"

    def apply_(self, up: Uploading) -> None:
        up.sent = list(self.secagg.add_(up.cids, up.rows["delta"], up.coefficients["delta"], up.unclipped))


@dataclass(frozen=True)
class Sum:
    """``local_sum += coefficient * row``; a gathering rule, and a server stage that reads rows, also keep each
    row, and a stage that removes clients each one's part of every other sum (the plan's ``sum`` stage)."""

    robust: RobustAggregation | None
    server_stages: StageRows | None = None
    stage: str = "sum"

    def apply_(self, up: Uploading) -> None:
        coefficients = up.summed or up.coefficients
        up.local_sum.add_rows_(up.rows, coefficients)
        keepers: tuple[Gatherer | None, ...] = (self.robust, self.server_stages)
        for keeper in keepers:
            if keeper is not None:
                keeper.gather_(up.cids, up.rows["delta"], up.coefficients["delta"])
        if self.server_stages is not None and self.server_stages.removes_clients:
            self.server_stages.keep_(up.cids, client_parts(up, coefficients))


def client_parts(up: Uploading, coefficients: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """Each of the K clients' part (K, size) of every segment it adds to but ``delta``: ``coefficient * row``
    for the algorithm's segments, its weight, 1 for the count, its DP clip bit (0 without DP), as
    :func:`upload` and the stages before the sum add them."""
    k, device = len(up.cids), up.local_sum.flat.device
    parts = {name: rows * coefficients[name][:, None] for name, rows in up.rows.items() if name != "delta"}
    if not isinstance(up.weights, Tensor) and k != 1:
        raise ValueError(f"upload: {k} clients' parts need each one's weight (a (K,) tensor), not their total")
    weights = up.weights if isinstance(up.weights, Tensor) else torch.full((k,), float(up.weights), device=device)
    parts["weight"] = weights.reshape(k, 1)
    parts["clients"] = torch.ones(k, 1, device=device)
    unclipped = up.unclipped if up.unclipped is not None else torch.zeros(k, device=device)
    parts["unclipped"] = unclipped.reshape(k, 1)
    return parts


def client_pipeline(stages: UpdateStages, compress: Compress | None = None) -> tuple[ClientStage, ...]:
    """The run's client stages in order, from those it has (an executor builds it once a round)."""
    privacy, robust = stages.privacy, stages.robust
    pipeline: list[ClientStage] = []
    if stages.attack is not None:
        pipeline.append(AttackApply(stages.attack))
    if privacy is not None:
        pipeline.append(DpClip(privacy))
    if compress is not None:
        pipeline.append(UplinkCompress(compress))
        if privacy is not None:
            pipeline.append(DpDecodedClip(privacy))
    if privacy is not None and not privacy.central:
        pipeline.append(DpLocalNoise(privacy))
    if robust is not None and robust.cfg.per_client:
        pipeline.append(RuleTransform(robust))
    if stages.secagg is not None:
        pipeline.append(SecAggMask(stages.secagg))
    pipeline.append(Sum(robust, stages.server_stages))
    return tuple(pipeline)


# ---------------------------------------------------------------- one call


def upload(
    updates: ClientUpdates,
    cids: list[int],
    weights: float | Tensor,
    local_sum: SumBuffer,
    pipeline: Sequence[ClientStage],
    uplinks: list[ClientState] | None = None,
    round_idx: int = 0,
) -> list[int | None]:
    """Pass the K clients' update rows through the round's client stages in order (:func:`client_pipeline`,
    which ends by adding them into ``local_sum`` with their coefficients); ``weights`` are their aggregation
    weights (K,) (a float: one client's), ``uplinks`` the clients' compressor states (dicts the compressor
    fills, given whenever the run compresses), ``round_idx`` keys local DP noise. Returns each client's wire
    bytes (None: dense)."""
    up = Uploading(cids, updates.rows, updates.coefficients, uplinks, round_idx, local_sum, weights, [None] * len(cids))
    for stage in pipeline:
        stage.apply_(up)
    local_sum.segments["weight"] += weights.sum() if isinstance(weights, Tensor) else weights
    local_sum.segments["clients"] += float(len(cids))
    return up.sent


# ---------------------------------------------------------------- the rank's sum, one flat buffer
class SumBuffer:
    """Named, contiguous segments of ``flat``; ``segments[name]`` is a view.

    The executors add every client's rows in place (:meth:`add_rows_`), the engine all-reduces ``flat`` once
    per round, and the segment views then read the global sums without copying. Where ``kept`` is a list (the
    asynchronous server applies each client's update on its own arrival), each call also appends each of its K
    clients' rows times their coefficients, by segment, in the order the clients were trained.
    """

    def __init__(self, sizes: Mapping[str, int], device: torch.device | str = "cpu") -> None:
        self.flat = torch.zeros(sum(sizes.values()), device=device)
        self.kept: list[dict[str, Tensor]] | None = None  # by client
        self.segments: dict[str, Tensor] = {}
        offset = 0
        for name, size in sizes.items():
            self.segments[name] = self.flat[offset : offset + size]
            offset += size

    def zero_(self) -> None:
        self.flat.zero_()

    def add_rows_(self, rows: Mapping[str, Tensor], coefficients: Mapping[str, Tensor]) -> None:
        """``segment += coefficients[name] @ rows[name]`` for K rows, in place: one fused multiply-add for one
        row, one matrix-vector product for several; nothing is allocated and nothing is read on the host."""
        if self.kept is not None:  # a tensor of its own for each client, let go with that client's result
            k_rows = next(iter(rows.values())).shape[0]
            self.kept.extend({n: block[k] * coefficients[n][k] for n, block in rows.items()} for k in range(k_rows))
        for name, block in rows.items():
            segment, coefficient = self.segments[name], coefficients[name]
            if block.shape[0] == 1:
                segment.addcmul_(block[0], coefficient)
            else:
                segment.addmv_(block.t(), coefficient)

    @property
    def nbytes(self) -> int:
        return self.flat.numel() * self.flat.element_size()
