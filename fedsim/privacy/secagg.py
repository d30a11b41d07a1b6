"""Secure aggregation (SecAgg+) as a stage of the round: the server learns the sum of the clients' updates and
nothing else, as Flower's ``SecAggPlusWorkflow`` with ``secaggplus_mod`` computes it.

Each surviving client turns its update into integers the way Flower's client does: its weight becomes the factor
``q_w = round(w / max_weight * Q)``, its (already DP-clipped) update is scaled by ``q_w / Q``, clipped to
``[-clipping_range, clipping_range]`` and stochastically rounded into ``[0, Q]`` (``Q`` the
``quantization_range``). The vector ``[q_w, unclipped, quantized update]`` (``unclipped``: DP's centred bit for the
adaptive clip, doubled into an integer, +1 when the clipping left the update alone and -1 when not) then gets its
self mask and one pairwise mask per ring neighbour (``+`` towards a smaller id, ``-`` towards a larger), all modulo
``modulus_range``, and is added into the rank's masked sum. After the round's all-reduce of the masked sums the
server subtracts the survivors' self masks (their seeds recovered from the neighbours' Shamir shares) and the
pairwise masks the dropped clients left behind (their mask keys recovered likewise), and reads the sum:
``sum_i q_w,i / Q * max_weight`` is the weight, and the dequantized update sum, times ``max_weight``, the weighted
sum of the updates.

Where a simulation differs: the masks come from torch's generator seeded with 63 bits of the agreed key
(Flower seeds numpy's with 32), on the rank's device, so no client's vector is read on the host; the clients
that drop out (``emulation.dropout``) are the ones that leave after sharing their keys and before sending
their vector, which is the case the protocol must recover from; and the simulator keeps the plain sum beside
the masked one, to report the protocol's quantization error, never to train with it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from torch import Tensor

from fedsim.comm.ledger import ByteLedger
from fedsim.config import ConfigError, SecAggConfig
from fedsim.privacy.secagg_keys import ID_BYTES, SHARE_BYTES, RoundKeys, agree
from fedsim.streams import noise_generator

HEADER = 2  # the weight factor and the unclipped flag, ahead of the update
_QUANTIZE = 0x51  # the stochastic rounding's stream, beside the seed, the round and the client
FLOWER_MAX_WEIGHT = 1000.0


def secagg_max_weight(settings: SecAggConfig, uniform: bool) -> float:
    """The largest client weight SecAgg+ scales by: ``secagg.max_weight``, else 1 when every client weighs 1
    (``uniform``: DP, ``weighting: uniform``), else Flower's default."""
    return settings.max_weight or (1.0 if uniform else FLOWER_MAX_WEIGHT)


def dequantized_slack(secagg: SecAggConfig, numel: int, max_weight: float) -> float:
    """How far past its clipped norm a dequantized update can reach: stochastic rounding moves each of its
    ``numel`` values by less than one step ``2 c / Q`` (times ``max_weight``), so its norm by less than
    ``sqrt(numel)`` steps. Under central DP a client's message is then within ``clip + slack``, the sensitivity
    the noise covers (:meth:`fedsim.privacy.dp.DifferentialPrivacy.cover_slack`)."""
    return math.sqrt(numel) * 2 * secagg.clipping_range * max_weight / secagg.quantization_range


def check_dequantized_bound(secagg: SecAggConfig, clip: float | None, numel: int, max_weight: float) -> None:
    """Under DP, refuse a quantization so coarse that a dequantized update could exceed the initial clip by more
    than 0.1% (the noise covers the slack at every clip, but a coarser grid only adds noise). ``clip`` is DP's,
    None without DP."""
    if clip is None:
        return
    slack = dequantized_slack(secagg, numel, max_weight)
    reach = slack * secagg.quantization_range
    if slack > 1e-3 * clip:
        least = math.ceil(reach / (1e-3 * clip))
        raise ConfigError(
            f"secagg.quantization_range={secagg.quantization_range}: a dequantized update of this model's {numel:,}"
            f" values may exceed privacy.clip={clip:g} by up to {slack:.3g} ({slack / clip:.3g} clips), past its"
            f" sensitivity; use quantization_range={least} or more (and a modulus_range above the cohort's sum)"
        )


def mask(key: bytes, size: int, modulus: int, device: torch.device) -> Tensor:
    """The mask a 32-byte ``key`` expands to: ``size`` integers uniform in ``[0, modulus)``."""
    seed = int.from_bytes(key[:8], "little") & ((1 << 63) - 1)
    generator = torch.Generator(device=device).manual_seed(seed)
    return torch.randint(0, modulus, (size,), generator=generator, device=device, dtype=torch.int64)


def quantize(update: Tensor, ratio: Tensor, clipping_range: float, levels: int, generator: torch.Generator) -> Tensor:
    """Flower's quantization of ``update * ratio``: clipped to ``[-c, c]``, mapped onto ``[0, levels]`` and
    rounded up with probability equal to the fraction (unbiased), in float64; int64 out."""
    scaled = (update.double() * ratio).clamp_(-clipping_range, clipping_range)
    scaled.add_(clipping_range).mul_(levels / (2 * clipping_range))
    noise = torch.rand(scaled.shape, generator=generator, device=scaled.device, dtype=torch.float64)
    return scaled.add_(noise).floor_().to(torch.int64)


class SecAggPlus:
    """One run's SecAgg+: a round's keys and shares (:meth:`begin_round`), the clients' masked vectors
    (:meth:`add_`), the server's unmasking (:meth:`aggregate_`), and what each round cost."""

    def __init__(
        self, cfg: SecAggConfig, seed: int, max_weight: float, numel: int, device: torch.device, announce: bool
    ) -> None:
        """``max_weight`` is the largest client weight the updates are scaled by (:func:`secagg_max_weight`)."""
        self.cfg, self.seed, self.numel, self.device, self.announce = cfg, seed, numel, device, announce
        self.max_weight = max_weight
        self.modulus, self.levels = cfg.modulus_range, cfg.quantization_range
        self.slack = dequantized_slack(cfg, numel, max_weight)  # a dequantized message's reach past its clip
        self.word_bytes = math.ceil(math.log2(self.modulus) / 8)  # a masked entry on the wire
        self.masked = torch.zeros(HEADER + numel, dtype=torch.int64, device=device)
        self.unmasked: Tensor | None = None  # the integer sum the server recovered in the last round
        self.keys: RoundKeys | None = None
        self.round_idx = 0
        # under DP (without diagnostics) the quantization error, measured against the un-noised sum whose norm it
        # reveals, is neither stored nor summarised
        self.withheld = False
        self.survivors: list[int] = []  # the round's clients that send their masked vectors
        self.dropped: list[int] = []  # those that leave after sharing their keys
        self.failures: list[dict[str, Any]] = []
        self.metrics: dict[str, float | None] = {}
        self.totals = {"up": 0, "down": 0, "clients": 0, "error_sum": 0.0, "rounds": 0}
        self.heaviest = torch.zeros((), device=device)  # the round's largest client weight, on the device
        self.warned_weight = False

    @property
    def vector_bytes(self) -> int:
        return (HEADER + self.numel) * self.word_bytes

    def begin_round(self, round_idx: int, cohort: Sequence[int], dropped: set[int] | Sequence[int]) -> None:
        """Stages 0 and 1 for the round's ``cohort``; the clients in ``dropped`` leave after them."""
        gone = set(dropped)
        self.round_idx = round_idx
        self.survivors = [c for c in cohort if c not in gone]
        self.dropped = [c for c in cohort if c in gone]
        self.masked.zero_()
        self.heaviest.zero_()
        self.unmasked = None
        shares = self.cfg.num_shares + (self.cfg.num_shares % 2 == 0)  # Flower: odd, one neighbourhood either side
        self.keys = None
        if len(cohort) >= 2 and min(shares, len(cohort)) >= self.cfg.reconstruction_threshold:
            self.keys = RoundKeys(self.seed, round_idx, cohort, shares, self.cfg.reconstruction_threshold)

    # --------------------------------------------------------------------------------------- the clients

    def add_(self, cids: Sequence[int], update: Tensor, weights: Tensor, unclipped: Tensor | None) -> list[int]:
        """Stage 2 for K clients: quantize and mask each row of ``update`` (K, numel) with its weight and its
        unclipped flag, and add the masked vectors into the rank's masked sum; returns each one's wire bytes."""
        if self.keys is None:  # the round cannot run the protocol: begin_round saw it, aggregate_ says why
            return [0] * len(cids)
        top = self.modulus - 1
        torch.maximum(self.heaviest, weights.max(), out=self.heaviest)  # checked once a round, in aggregate_
        for k, cid in enumerate(cids):
            factor = torch.round(weights[k].double() / self.max_weight * self.levels)
            generator = noise_generator(self.device, self.seed, self.round_idx, _QUANTIZE, cid)
            vector = torch.empty_like(self.masked)
            vector[0] = factor.to(torch.int64)
            vector[1] = 0 if unclipped is None else torch.round(2 * unclipped[k]).to(torch.int64)
            quantized = quantize(update[k], factor / self.levels, self.cfg.clipping_range, self.levels, generator)
            vector[HEADER:] = quantized
            vector.add_(self._mask(self.keys.parties[cid].self_seed))
            for other in self.keys.neighbours[cid]:
                if other != cid:
                    pairwise = self._mask(self.keys.pair_key(cid, other))
                    vector.add_(pairwise, alpha=1 if cid > other else -1)
            self.masked.add_(vector.bitwise_and_(top)).bitwise_and_(top)
        return [self.vector_bytes] * len(cids)

    def _mask(self, key: bytes) -> Tensor:
        return mask(key, HEADER + self.numel, self.modulus, self.device)

    # --------------------------------------------------------------------------------------- the server

    def aggregate_(self, all_reduce: Callable[[Tensor], int], sums: Mapping[str, Tensor], ledger: ByteLedger) -> bool:
        """Stage 3: combine the ranks' masked sums, remove the masks, and write the weighted update sum, the
        weight and the unclipped count into ``sums`` (which hold the plain sums, to measure the error against).
        ``all_reduce`` sums a tensor over the pool's ranks in place. Returns True when the round failed (too few
        survivors to unmask, say): ``sums`` must then not be used."""
        ledger.record_moved(all_reduce(self.masked))  # a second collective, of integers: SecAgg+ rounds only
        if not self.warned_weight and float(self.heaviest) > self.max_weight and self.announce:
            self.warned_weight = True  # Flower warns too: the weight factors may overflow the modulus
            print(f"fedsim: warning: a client weighs more than secagg.max_weight={self.max_weight:g}", file=sys.stderr)
        top = self.modulus - 1
        self.masked.bitwise_and_(top)
        reason = self._why_not()
        total = self.masked.clone() if reason is None else None
        if total is not None and self.keys is not None:
            alive = set(self.survivors)
            for cid in self.survivors:
                seed = self.keys.recover(cid, alive, 0)
                assert seed is not None  # _why_not checked every needed secret has its threshold of shares
                total.sub_(self._mask(seed))
            for cid in self.dropped:
                key_bytes = self.keys.recover(cid, alive, 1)
                assert key_bytes is not None
                key = X25519PrivateKey.from_private_bytes(key_bytes)
                for other in self.keys.neighbours[cid]:
                    if other in alive:  # the pairwise mask ``other`` added for the client that left
                        pairwise = self._mask(agree(key, self.keys.public[other][0], b"mask"))
                        total.add_(pairwise, alpha=1 if cid > other else -1)
            total.bitwise_and_(top)
            self.unmasked = total
        self._charge(ledger, reason is None)
        if reason is not None or total is None:
            self.failures.append({"round": self.round_idx, "reason": reason})
            self.metrics |= {"secagg_failed": 1.0, "secagg_quantization_error": None}
            if self.announce:
                print(f"fedsim: round {self.round_idx}: SecAgg+ failed, the model stays: {reason}", file=sys.stderr)
            return True
        self._release(total, sums)
        return False

    def _why_not(self) -> str | None:
        """Why the round cannot be unmasked, or None."""
        n, t = len(self.survivors), self.cfg.reconstruction_threshold
        cohort = n + len(self.dropped)
        if self.keys is None:
            return f"{cohort} clients in the round: SecAgg+ needs at least {max(2, t)} (reconstruction_threshold={t})"
        if n == 0:
            return f"all {cohort} clients of the round dropped out"
        if n * (self.levels + 1) > self.modulus:
            return f"{n} quantized updates overflow modulus_range={self.modulus} (quantization_range={self.levels})"
        alive = set(self.survivors)
        for cid in self.survivors + self.dropped:
            held = sum(h in alive for h in self.keys.neighbours[cid])
            if held < t:
                return (
                    f"client {cid}'s secret has {held} surviving holders of its shares, fewer than"
                    f" reconstruction_threshold={t} ({len(self.dropped)} of {cohort} clients dropped out)"
                )
        return None

    def _release(self, total: Tensor, sums: Mapping[str, Tensor]) -> None:
        """The unmasked integers as the round's sums, and the quantization error against the plain ones."""
        c, levels, n = self.cfg.clipping_range, self.levels, len(self.survivors)
        summed = total[HEADER:].double().mul_(2 * c / levels).sub_(n * c).mul_(self.max_weight)
        plain = sums["delta"]
        error = float((summed - plain.double()).norm() / plain.double().norm().clamp_min(1e-30))
        plain.copy_(summed)
        sums["weight"].fill_(float(total[0]) / levels * self.max_weight)
        doubled = int(total[1])  # the doubled centred bits' sum, modulo the modulus: back to a signed integer
        sums["unclipped"].fill_((doubled - self.modulus if doubled > self.modulus // 2 else doubled) / 2)
        self.metrics |= {"secagg_failed": 0.0, "secagg_quantization_error": None if self.withheld else error}
        if not self.withheld:
            self.totals["error_sum"] += error
            self.totals["rounds"] += 1

    def _charge(self, ledger: ByteLedger, unmasked: bool) -> None:
        """The protocol's bytes beyond the masked vectors (charged with the clients' uploads): keys, shares."""
        keys = self.keys
        if keys is None:
            self.metrics = {"secagg_up_bytes": 0.0, "secagg_down_bytes": 0.0}
            return
        alive = set(self.survivors)
        up, down = dict(keys.up), dict(keys.down)
        for cid in self.survivors if unmasked else ():  # stage 3: each survivor returns one share per neighbour
            held = len(keys.neighbours[cid])
            down[cid] += held * ID_BYTES
            up[cid] += held * (ID_BYTES + SHARE_BYTES)
        extra_up, extra_down = sum(up.values()), sum(down.values())
        ledger.charge(up=extra_up, down=extra_down, kind="secagg")
        clients = len(alive) + len(self.dropped)
        vectors = len(alive) * self.vector_bytes
        self.totals["up"] += extra_up + vectors
        self.totals["down"] += extra_down
        self.totals["clients"] += clients
        self.metrics = {
            "secagg_up_bytes": (extra_up + vectors) / clients,  # per client of the round, masked vector included
            "secagg_down_bytes": extra_down / clients,  # per client, beside the model it downloads
        }

    # --------------------------------------------------------------------------------------- records

    def round_metrics(self) -> dict[str, float | None]:
        return dict(self.metrics)

    def state_dict(self) -> dict[str, Any]:
        return {"totals": dict(self.totals), "failures": list(self.failures)}

    def tensors(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor] | None = None) -> None:
        self.totals = {k: type(v)(state["totals"][k]) for k, v in self.totals.items()}
        self.failures = [dict(f) for f in state["failures"]]

    def summary(self) -> dict[str, Any]:
        """summary.json's ``secagg``: the protocol's settings, its bytes per client, its error, the failures."""
        t = self.totals
        clients = max(int(t["clients"]), 1)
        return {
            "num_shares": self.cfg.num_shares,
            "reconstruction_threshold": self.cfg.reconstruction_threshold,
            "clipping_range": self.cfg.clipping_range,
            "quantization_range": self.levels,
            "modulus_range": self.modulus,
            "max_weight": self.max_weight,
            "key_agreement": "X25519 + HKDF-SHA256",
            "bytes_up_per_client": t["up"] / clients,
            "bytes_down_per_client": t["down"] / clients,
            "quantization_error": t["error_sum"] / t["rounds"] if t["rounds"] else None,
            "failed_rounds": list(self.failures),
        }
