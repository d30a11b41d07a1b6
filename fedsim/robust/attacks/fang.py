"""Fang et al.'s full-knowledge local model poisoning (USENIX Security 2020), written on updates: the attackers
know every honest update of the round and the rule, and push the aggregate against the direction ``s`` the
honest updates would move each parameter in (``s = sign(mean of the honest updates)``).

``fang_trim`` (the paper's attack on trimmed mean, and on the median): at each coordinate every attacker sends a
value drawn uniformly beyond the honest extreme on the far side of ``s``: where ``s > 0``, in
``[w_min / b, w_min]`` when the honest minimum ``w_min > 0``, else in ``[b w_min, w_min]``; where ``s < 0``, in
``[w_max, b w_max]`` when ``w_max > 0``, else in ``[w_max / b, w_max]`` (``b = 2`` in the paper); where ``s = 0``,
0. Each attacker draws its own values, from a stream keyed by the seed, the round and the client.

``fang_krum`` (the attack on Krum): every attacker sends ``-lambda s``, with ``lambda`` the paper's upper bound,
``1 / ((m - 2c - 1) sqrt(d)) min_i sum_{l in N_i} ||g_l - g_i|| + 1 / sqrt(d) max_i ||g_i||`` (``m`` updates
of which ``c`` malicious, ``d`` entries, ``N_i`` the ``m - c - 2`` honest updates nearest honest ``g_i``), halved
until Krum (assuming the ``c`` attackers) picks a malicious update, or down to ``threshold``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from fedsim.config.attack import AttackConfig, register_attack
from fedsim.robust.attack import HonestUpdates, ModelPoisoning
from fedsim.robust.attacks.min_max import squared_distances
from fedsim.robust.krum import krum_selection
from fedsim.streams import noise_generator

_DRAWS = 0x4641  # the stream beside the seed, round and client for fang_trim's values


def fang_trim_rows(honest: Tensor, uniform: Tensor, b: float) -> Tensor:
    """(c, d): the attackers' values from the honest rows (n, d), given ``uniform`` (c, d) draws in [0, 1)."""
    direction = honest.sum(0).sign()
    lo, hi = honest.min(0).values, honest.max(0).values
    # the interval beyond the extreme on the far side of the direction: [start, start + span * u]
    below = torch.where(lo > 0, lo / b, b * lo)  # where s > 0: [below, lo]
    above = torch.where(hi > 0, b * hi, hi / b)  # where s < 0: [hi, above]
    start = torch.where(direction > 0, below, hi)
    end = torch.where(direction > 0, lo, above)
    out = start + (end - start) * uniform
    return torch.where(direction == 0, torch.zeros_like(out), out)


def fang_krum_lambda(honest: Tensor, attackers: int) -> float:
    """The paper's upper bound on ``lambda`` for ``attackers`` malicious updates beside the honest rows (n, d)."""
    n, d = honest.shape
    m, c = n + attackers, attackers
    distances = torch.cdist(honest, honest)
    distances.fill_diagonal_(math.inf)  # the nearest *other* honest updates
    nearest = max(min(m - c - 2, n - 1), 1)
    closest = distances.sort(dim=1).values[:, :nearest].sum(1).min()
    return float(closest / (max(m - 2 * c - 1, 1) * math.sqrt(d)) + honest.norm(dim=1).max() / math.sqrt(d))


def fang_krum_update(honest: Tensor, attackers: int, threshold: float) -> Tensor:
    """(d,): ``-lambda s``, ``lambda`` halved from the bound until Krum picks it (or below ``threshold``)."""
    n = honest.shape[0]
    direction = honest.sum(0).sign()
    lam = fang_krum_lambda(honest, attackers)
    honest_square = (honest * honest).sum(1)
    pairs = squared_distances(honest)
    along = honest @ direction  # <g_i, s>
    s_square = float(direction @ direction)
    while lam >= threshold:
        # squared distances from each honest update to -lambda s; the attackers' copies are 0 apart
        to_crafted = (honest_square + 2 * lam * along + lam * lam * s_square).clamp_min(0)
        full = honest.new_zeros(n + attackers, n + attackers)
        full[:n, :n] = pairs
        full[:n, n:] = to_crafted[:, None]
        full[n:, :n] = to_crafted[None, :]
        if krum_selection(full, attackers, 1)[0] >= n:
            break
        lam /= 2
    return -lam * direction


class FangTrimConfig(AttackConfig):
    kind: Literal["fang_trim"] = "fang_trim"
    b: float = Field(2.0, gt=1, le=1e3, description="how far past the honest extreme the values may go")
    reads_honest: ClassVar[bool] = True
    needs_rows: ClassVar[bool] = True


class FangKrumConfig(AttackConfig):
    kind: Literal["fang_krum"] = "fang_krum"
    threshold: float = Field(1e-5, gt=0, le=1, description="the least lambda the search tries")
    reads_honest: ClassVar[bool] = True
    needs_rows: ClassVar[bool] = True


@register_attack(FangTrimConfig)
class FangTrim(ModelPoisoning):
    cfg: FangTrimConfig

    def craft_each(self, honest: HonestUpdates, cids: Sequence[int], round_idx: int) -> Tensor:
        assert honest.rows is not None
        rows = honest.rows.double()
        uniform = torch.empty(len(cids), rows.shape[1], dtype=torch.float64, device=rows.device)
        for k, cid in enumerate(cids):
            uniform[k].uniform_(generator=noise_generator(rows.device, self.context.seed, round_idx, _DRAWS, cid))
        return fang_trim_rows(rows, uniform, self.cfg.b).float()


@register_attack(FangKrumConfig)
class FangKrum(ModelPoisoning):
    cfg: FangKrumConfig

    def craft(self, honest: HonestUpdates) -> Tensor:
        assert honest.rows is not None
        m, c = honest.rows.shape[0] + honest.attackers, honest.attackers
        if m - 2 * c - 1 < 1:
            self.notes.once(
                "clamped",
                f"attack.kind=fang_krum: a round of {m} updates with {c} attackers makes the paper's m - 2c - 1 ="
                f" {m - 2 * c - 1}, which its lambda bound divides by; it takes 1 there (Krum assumes fewer"
                " attackers)",
            )
        return fang_krum_update(honest.rows.double(), honest.attackers, self.cfg.threshold).float()
