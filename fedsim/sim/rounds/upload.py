"""What clients send after local training, written once over the K clients of a call (K = 1 sequentially).

Each client's update stays its own row until it has passed through the round's update transforms: the uplink
compressor now (top-k with error feedback, whose residual is the client's ``uplink`` state in the store), and
the place where clipping, noise and simulated attacks go. Only then are the rows added into the rank's local
sum (:class:`SumBuffer`, one flat buffer of every quantity the algorithm sums, so a round needs one
collective), each with its coefficient (its aggregation weight, or 1), beside the clients' weights and count.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from fedsim.algorithms.group import ClientUpdates
from fedsim.sim.state.state_store import ClientState

if TYPE_CHECKING:  # dp-accounting and the cryptography libraries load only in a private run
    from fedsim.privacy.dp import DifferentialPrivacy
    from fedsim.privacy.secagg import SecAggPlus
    from fedsim.robust import Attack, RobustAggregation
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


NO_STAGES = UpdateStages()


def upload(
    updates: ClientUpdates,
    cids: list[int],
    weight_total: float | Tensor,
    local_sum: SumBuffer,
    compress: Compress | None = None,
    uplinks: list[ClientState] | None = None,
    stages: UpdateStages = NO_STAGES,
    round_idx: int = 0,
) -> list[int | None]:
    """Transform the K clients' update rows in place, then add them into ``local_sum`` with their coefficients;
    ``weight_total`` is the sum of their aggregation weights. The transforms, in DESIGN.md's order: simulated
    attackers' updates, DP clipping (counting the clients it left alone), the uplink compressor (``uplinks``
    are the clients' uplink states, dicts the compressor fills, given whenever ``compress`` is) and under DP
    the clip of its decoded message, local DP noise (keyed by ``round_idx``), the aggregation rule's norm
    bound or centered clip on what the server decodes (so error feedback cannot carry a message past it), and
    SecAgg+'s quantizing and masking into its own masked sum (the plain sum is still kept, to measure the
    protocol's error against); a gathering rule then keeps each row. Returns each
    client's wire bytes (None: sent dense)."""
    sent: list[int | None] = [None] * len(cids)
    unclipped = None
    privacy, secagg, robust = stages.privacy, stages.secagg, stages.robust
    if stages.attack is not None:
        stages.attack.apply_(cids, updates.rows["delta"], updates.coefficients["delta"])
    if privacy is not None:
        privacy.plant_(cids, updates.rows)  # an audit's canaries send their direction instead
        unclipped = privacy.clip_(updates.rows)
        local_sum.segments["unclipped"] += unclipped.sum()
    if compress is not None and uplinks is not None:
        sent = compress(cids, updates.rows, uplinks)
        if privacy is not None:  # clip what the server decodes; error feedback keeps what is cut off
            privacy.clip_decoded_(updates.rows, uplinks)
    if privacy is not None and not privacy.central:
        privacy.local_noise_(round_idx, cids, updates.rows)
    if robust is not None and robust.cfg.per_client:  # a server-side rule acts on what the server decodes
        robust.transform_(updates.rows["delta"])
    if secagg is not None:
        sent = list(secagg.add_(cids, updates.rows["delta"], updates.coefficients["delta"], unclipped))
    summed = updates.coefficients
    if stages.attack is not None:  # an omniscient attacker's placeholder is not summed: finish_ adds its row
        summed = {**summed, "delta": stages.attack.summed(cids, summed["delta"])}
    local_sum.add_rows_(updates.rows, summed)
    if robust is not None:
        robust.gather_(cids, updates.rows["delta"], updates.coefficients["delta"])
    local_sum.segments["weight"] += weight_total
    local_sum.segments["clients"] += float(len(cids))
    return sent


# ---------------------------------------------------------------- the rank's sum, one flat buffer
class SumBuffer:
    """Named, contiguous segments of ``flat``; ``segments[name]`` is a view.

    The executors add every client's rows in place (:meth:`add_rows_`), the engine all-reduces ``flat`` once
    per round, and the segment views then read the global sums without copying.
    """

    def __init__(self, sizes: Mapping[str, int], device: torch.device | str = "cpu") -> None:
        self.flat = torch.zeros(sum(sizes.values()), device=device)
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
        for name, block in rows.items():
            segment, coefficient = self.segments[name], coefficients[name]
            if block.shape[0] == 1:
                segment.addcmul_(block[0], coefficient)
            else:
                segment.addmv_(block.t(), coefficient)

    @property
    def nbytes(self) -> int:
        return self.flat.numel() * self.flat.element_size()
