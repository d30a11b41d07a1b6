"""Differential privacy as a stage of the round: clients clip (and under local DP noise) their updates before
they are summed; the server noises the sum (central DP) and moves an adaptive clip, after the one all-reduce.

Central DP is DP-FedAvg (McMahan et al. 2018) as pfl-research and Flower's server-side fixed clipping run it:
every client's update counts once (uniform weights), the sum of the clipped updates gets Gaussian noise and is
divided by the expected cohort, a fixed denominator (dividing by the clients that happened to arrive would
leak their number). The noise has standard deviation ``z * C / noise_cohort`` on the average: pfl's noise
cohort, the noise a deployment cohort of ``noise_cohort`` clients needs, for a simulated cohort that is
smaller. The noise is drawn from a generator keyed by (seed, round), so every rank of a pool adds the same
noise to the same global sum and a run is reproducible; a deployment draws it from a secret source.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from fedsim.config import ConfigError, RunConfig
from fedsim.privacy.accountant import LEAST_NOISE, Accounting, EpsilonCurve
from fedsim.privacy.clip import clip_rows_, next_clip, update_noise_multiplier
from fedsim.streams import noise_generator

_CENTRAL, _LOCAL, _COUNT = 0x43, 0x4C, 0x42  # keys of the noise streams, beside the seed and the round


class DifferentialPrivacy:
    """One run's DP: the clip, the noise multipliers and the accountant, and the two halves of the stage."""

    def __init__(self, cfg: RunConfig, population: int) -> None:
        privacy = cfg.privacy
        assert privacy.enabled and privacy.clip is not None
        self.cfg, self.seed, self.kind = privacy, cfg.seed, privacy.kind
        self.cohort = cfg.cohort_size  # the expected cohort: the average's fixed denominator
        self.noise_cohort = privacy.noise_cohort or self.cohort
        self.accounting = Accounting(
            privacy.kind, privacy.accountant, cfg.sampling, privacy.population or population, self.noise_cohort,
            privacy.delta,
        )  # fmt: skip
        if privacy.noise_multiplier is not None:
            least = LEAST_NOISE[privacy.accountant]
            if 0 < privacy.noise_multiplier < least:
                raise ConfigError(
                    f"privacy.noise_multiplier={privacy.noise_multiplier}: accountant={privacy.accountant} handles"
                    f" {least} and more (use rdp, or 0 for clipping without noise)"
                )
            self.noise_multiplier = privacy.noise_multiplier
        else:
            assert privacy.target_epsilon is not None
            self.noise_multiplier = self.accounting.calibrate(privacy.target_epsilon, cfg.rounds)
        adaptive = privacy.adaptive
        self.count_noise = 0.0 if adaptive is None else adaptive.count_noise or self._count_noise()
        self.update_noise = self.noise_multiplier
        if adaptive is not None and self.noise_multiplier > 0:
            try:
                self.update_noise = update_noise_multiplier(self.noise_multiplier, self.count_noise)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        self.clip = privacy.clip
        self.epsilon = EpsilonCurve(self.accounting, self.noise_multiplier)

    def _count_noise(self) -> float:
        """The clipped count's default noise: the paper's noise cohort / 20, or, in a cohort too small for that,
        what leaves 90% of the privacy budget to the update (``(2 sigma_b)**-2 = z**-2 / 10``)."""
        return max(self.noise_cohort / 20, 10**0.5 * self.noise_multiplier / 2)

    @property
    def central(self) -> bool:
        return self.kind == "central"

    def allows(self, rounds: int) -> bool:
        """Whether ``rounds`` rounds stay within ``max_epsilon``."""
        return self.cfg.max_epsilon is None or self.epsilon(rounds) <= self.cfg.max_epsilon

    # ------------------------------------------------------------------------------------- the clients' half

    def clip_(self, rows: Mapping[str, Tensor]) -> Tensor:
        """Clip the K clients' update rows in place; returns (K,) 1 for each client that was within the clip
        already, else 0, on the device (no host read)."""
        return (clip_rows_(rows, self.clip) <= self.clip).to(torch.float32)

    def local_noise_(self, round_idx: int, cids: list[int], rows: Mapping[str, Tensor]) -> None:
        """Under local DP, add each client's own Gaussian noise (``noise_multiplier * clip``) to its rows."""
        if self.kind != "local" or self.noise_multiplier == 0:
            return
        std = self.noise_multiplier * self.clip
        device = next(iter(rows.values())).device
        for k, cid in enumerate(cids):
            generator = noise_generator(device, self.seed, round_idx, _LOCAL, cid)
            for block in rows.values():
                noise = torch.randn(block.shape[1], generator=generator, device=block.device, dtype=block.dtype)
                block[k].add_(noise, alpha=std)

    # ------------------------------------------------------------------------------------- the server's half

    def release_(self, sums: Mapping[str, Tensor], round_idx: int) -> None:
        """Turn the round's global sums into what DP releases, in place: under central DP noise on the summed
        update and the expected cohort as the denominator; then move an adaptive clip by the noised count."""
        scale = self.cohort / self.noise_cohort  # the noise cohort's noise, in the trained cohort's sum
        if self.central:
            update = sums["delta"]
            if self.update_noise > 0:
                generator = noise_generator(update.device, self.seed, round_idx, _CENTRAL)
                noise = torch.randn(update.shape, generator=generator, device=update.device, dtype=update.dtype)
                update.add_(noise, alpha=self.update_noise * self.clip * scale)
            sums["weight"].fill_(float(self.cohort))
        adaptive = self.cfg.adaptive
        if adaptive is not None:
            count_generator = noise_generator(torch.device("cpu"), self.seed, round_idx, _COUNT)
            count_noise = float(torch.randn((), generator=count_generator)) * self.count_noise * scale
            share = (float(sums["unclipped"]) + count_noise) / self.cohort  # one host read a round
            self.clip = next_clip(self.clip, share, adaptive.target_quantile, adaptive.lr)

    # ------------------------------------------------------------------------------------- records

    def round_metrics(self, rounds: int) -> dict[str, float | None]:
        """What the run store records after ``rounds`` rounds: epsilon spent (None: unbounded, no noise) and
        the clip the next round uses."""
        epsilon = self.epsilon(rounds)
        return {"epsilon": epsilon if math.isfinite(epsilon) else None, "clip": self.clip}

    def state_dict(self) -> dict[str, float]:
        return {"clip": self.clip}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.clip = float(state["clip"])

    def summary(self, rounds: int) -> dict[str, Any]:
        """summary.json's ``privacy``: epsilon after ``rounds`` and every input the accountant took."""
        a = self.accounting
        return {
            "kind": self.kind,
            "epsilon": self.epsilon(rounds),
            "delta": a.delta,
            "noise_multiplier": self.noise_multiplier,
            "update_noise_multiplier": self.update_noise,
            "clip": self.clip,
            "adaptive": self.cfg.adaptive is not None,
            "sampling": a.sampling,
            "sampling_rate": a.sampling_rate,
            "population": a.population,
            "cohort": a.cohort,
            "trained_cohort": self.cohort,
            "rounds": rounds,
            "accountant": a.accountant,
            "neighbours": "replace-one" if a.replace_one else "add-or-remove-one",
        }
