"""What a run keeps private: differential privacy (``privacy:``) and secure aggregation (``secagg:``).

A DP mechanism's settings class subclasses :class:`PrivacyConfig` with ``kind: Literal["..."]`` and registers
with the builder of its stage (:data:`PRIVACY`; the built-in ``central`` and ``local`` Gaussian mechanisms are
in :mod:`fedsim.privacy.mechanisms`). It declares ``local`` when each client noises its own message (which is
then dense, so no uplink compressor can shrink it).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from fedsim.config.base import Strict
from fedsim.config.registry import Registry, StageConfig


class AdaptiveClip(Strict):
    """Adaptive clipping after Andrew et al. (arXiv 1905.03871): each round the clip ``C`` moves geometrically
    towards the ``target_quantile`` of the clients' update norms, ``C <- C * exp(-lr * (b - target_quantile))``,
    where ``b`` is the share of clients whose update was not clipped, released with Gaussian noise of standard
    deviation ``count_noise`` (in clients; default the noise cohort / 20, the paper's choice, or in a small
    cohort what leaves 90% of the privacy budget to the update)."""

    target_quantile: float = Field(
        0.5, gt=0, lt=1, description="the share of the clients' update norms the clip moves towards"
    )
    lr: float = Field(0.2, gt=0, le=10, description="the clip's geometric step size per round")
    count_noise: float | None = Field(None, gt=0, description="noise on the unclipped count, in clients")


class PrivacyAudit(Strict):
    """An empirical privacy estimate in the same run (Andrew et al., ICLR 2024): ``canaries`` clients of the
    population send a random direction of norm ``clip`` whenever sampled, and the final model's cosines with
    them, against ``unobserved`` fresh directions, give an epsilon estimate beside the accountant's."""

    canaries: int = Field(ge=2, le=100_000, description="canary clients, chosen from the population by the seed")
    unobserved: int = Field(1000, ge=2, le=100_000, description="fresh directions that estimate the null")


class PrivacyConfig(StageConfig):
    """Differential privacy of a round's client updates.

    ``central``: each client's update is clipped to L2 norm ``clip`` and the server adds Gaussian noise of
    standard deviation ``noise_multiplier * clip / noise_cohort`` to the average (DP-FedAvg; pfl's noise cohort:
    the noise a cohort of ``noise_cohort`` clients would need, for a simulated smaller cohort). ``local``: each
    client adds noise of standard deviation ``noise_multiplier * clip`` to its own clipped update. Give either
    ``noise_multiplier`` (epsilon is reported) or ``target_epsilon`` (the noise is calibrated before round 0).
    ``epsilon`` is the run as executed (its clients, its cohort, the noise its sum got); ``population`` and
    ``noise_cohort`` describe a larger deployment whose epsilon is reported beside it, and which
    ``target_epsilon`` and ``max_epsilon`` then speak of. Cohorts are accounted as they are sampled
    (fixed-size: without replacement, replace-one neighbours, sensitivity 2 clips; ``sampling: poisson``:
    add-or-remove, sensitivity 1; on the trace clock, where the trace decides who reports: unsampled, one
    client's updates zeroed, sensitivity 1; local DP: sensitivity 2), by privacy loss distributions (``pld``, tight:
    within a fraction of a percent of the worst pair of neighbours) or Renyi DP (``rdp``, up to 2x looser for a
    fixed cohort); ``auto`` takes ``pld`` wherever its distribution can be built (noise multiplier 0.3 and up);
    ``max_epsilon`` stops a run before the round that would spend more; ``audit`` adds an empirical estimate.
    What DP covers is the model: the clients' un-noised statistics of a round (their training loss and sample
    counts, federated evaluation's spread) are not stored unless ``diagnostics`` says so.
    """

    clip: float | None = Field(None, gt=0, le=1e6, description="L2 bound of a client's update (initial, if adaptive)")
    adaptive: AdaptiveClip | None = Field(None, description="adaptive clipping (Andrew et al.); None: a fixed clip")
    noise_multiplier: float | None = Field(
        None,
        ge=0,
        le=1e4,
        description="the noise's standard deviation over the sensitivity; set this or target_epsilon",
    )
    target_epsilon: float | None = Field(
        None, gt=0, le=1e4, description="calibrate the noise multiplier so the whole run spends this epsilon at delta"
    )
    delta: float = Field(1e-5, gt=0, lt=1, description="the delta of (epsilon, delta)-DP")
    noise_cohort: int | None = Field(None, ge=1, description="clients the noise is calibrated for; default the cohort")
    population: int | None = Field(None, ge=1, description="clients the accountant assumes; default data.clients")
    accountant: Literal["auto", "rdp", "pld"] = Field(
        "auto", description="auto: pld (the tight one) where its distribution can be built, else rdp"
    )
    max_epsilon: float | None = Field(
        None, gt=0, le=1e4, description="stop the run before a round would spend past this epsilon"
    )
    audit: PrivacyAudit | None = Field(
        None, description="a canary audit of the epsilon actually spent (Andrew et al. 2024); None: none"
    )
    noise_seed: Literal["run", "system"] = Field(
        "run", description="run: noise keyed by the seed (replayable); system: a secret from the OS (a deployment)"
    )
    diagnostics: bool = Field(
        False, description="store the clients' un-noised per-round statistics (train loss, samples), labelled so"
    )

    local: ClassVar[bool] = False  # each client noises its own message

    @model_validator(mode="after")
    def _complete(self) -> PrivacyConfig:
        if self.kind == "none":
            fields = type(self).model_fields
            changed = [n for n in fields if n not in ("kind", "factory") and getattr(self, n) != fields[n].default]
            if changed:  # a default written out (a saved config.json) is not a setting
                raise ValueError(f"privacy.{changed[0]} is set but privacy.kind is none (no differential privacy)")
            return self
        if self.clip is None:
            raise ValueError(f"privacy.kind={self.kind} needs privacy.clip, the L2 bound of a client's update")
        if (self.noise_multiplier is None) == (self.target_epsilon is None):
            raise ValueError("privacy: give exactly one of noise_multiplier and target_epsilon")
        if self.local and self.adaptive is not None:
            raise ValueError(
                f"privacy.adaptive: adaptive clipping releases a noised count centrally, and privacy.kind={self.kind}"
                " noises each client's message locally; use a central mechanism (privacy.kind=central)"
            )
        return self

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    @property
    def central(self) -> bool:
        """Whether the server noises the round's sum (read from ``local``, never from the kind's name)."""
        return self.enabled and not self.local


class NoPrivacy(PrivacyConfig):
    kind: Literal["none"] = "none"


class CentralDP(PrivacyConfig):
    kind: Literal["central"] = "central"


class LocalDP(PrivacyConfig):
    kind: Literal["local"] = "local"
    local: ClassVar[bool] = True


PRIVACY = Registry[PrivacyConfig](
    "privacy", PrivacyConfig, builtin="fedsim.privacy.mechanisms", default="none", decorator="register_privacy"
)
register_privacy = PRIVACY.register


class SecAggConfig(Strict):
    """SecAgg+ as Flower's ``SecAggPlusWorkflow`` runs it: each client's update (clipped first, under DP) is
    scaled by its weight over ``max_weight``, clipped to ``[-clipping_range, clipping_range]`` and quantised
    into ``[0, quantization_range]``, masked with a self mask and pairwise masks shared with the clients around
    it on a ring (its ``num_shares``-client neighbourhood, itself among them; an even number is rounded up, as
    Flower does), and the server unmasks the sum modulo ``modulus_range`` once ``reconstruction_threshold``
    shares of every needed secret come back (``kind: secagg_plus``; ``none``: no secure aggregation).
    ``max_weight`` defaults to 1 when clients weigh the same (DP, ``weighting: uniform``) and to Flower's 1000
    otherwise."""

    kind: Literal["none", "secagg_plus"] = Field(
        "none", description="secagg_plus: Flower's SecAgg+ masking of the round's sum; none: off"
    )
    num_shares: int = Field(
        0, ge=0, le=1024, description="the neighbourhood each client shares masks with (0 with kind none)"
    )
    reconstruction_threshold: int = Field(
        0, ge=0, le=1024, description="shares needed to rebuild a dropped client's mask"
    )
    max_weight: float | None = Field(None, gt=0, le=1e9, description="the largest client weight expected")
    clipping_range: float = Field(
        8.0, gt=0, le=1e6, description="each weighted update value is clipped to plus or minus this before quantising"
    )
    quantization_range: int = Field(2**22, ge=2, le=2**40, description="the integer range values are quantised into")
    modulus_range: int = Field(2**32, ge=4, le=2**48, description="a power of 2, above quantization_range")

    @model_validator(mode="after")
    def _consistent(self) -> SecAggConfig:
        if not self.enabled:
            for name in ("num_shares", "reconstruction_threshold"):
                if getattr(self, name):
                    raise ValueError(f"secagg.{name} is set but secagg.kind is none (set secagg.kind: secagg_plus)")
            return self
        if self.num_shares < 3:
            raise ValueError(f"secagg.num_shares must be at least 3 (a client, two neighbours): {self.num_shares}")
        if not 2 <= self.reconstruction_threshold <= self.num_shares:
            raise ValueError(
                f"secagg.reconstruction_threshold={self.reconstruction_threshold} must be between 2 and"
                f" num_shares={self.num_shares}"
            )
        if self.modulus_range & (self.modulus_range - 1):
            raise ValueError(f"secagg.modulus_range={self.modulus_range} must be a power of 2")
        if self.modulus_range <= self.quantization_range:
            raise ValueError(
                f"secagg.modulus_range={self.modulus_range} must be larger than"
                f" quantization_range={self.quantization_range}"
            )
        return self

    @property
    def enabled(self) -> bool:
        return self.kind != "none"


def private_run_refusal(run: Any) -> str | None:
    """Why a private run's other sections (``run``: its RunConfig) break what the accountant assumes, or None
    (also when the run is not private)."""
    privacy = run.privacy
    if not privacy.enabled:
        return None
    if run.control.enabled:
        return (
            f"privacy: control.kind={run.control.kind} probes read clients' raw, unclipped models and retune"
            " the round mid-run, which the accountant does not cover; drop control or privacy"
        )
    if run.emulation.availability < 1:
        return (
            f"privacy: emulation.availability={run.emulation.availability:g} lets a round find fewer reachable"
            f" clients than it samples, so the cohort is no longer the {run.sampling} sample of the population"
            " the accountant amplifies by; set emulation.availability=1"
        )
    if privacy.audit is not None and privacy.audit.canaries >= run.data.clients:
        return (
            f"privacy.audit.canaries={privacy.audit.canaries} must be fewer than data.clients={run.data.clients}"
            " (canaries are clients of the population)"
        )
    if privacy.noise_cohort is not None and privacy.noise_cohort < run.cohort_size:
        return (
            f"privacy.noise_cohort={privacy.noise_cohort} is smaller than the cohort ({run.cohort_size}): the"
            " noise would be too small for the clients that train"
        )
    if privacy.population is not None and privacy.population < run.data.clients:
        return (
            f"privacy.population={privacy.population} is below data.clients={run.data.clients}: the deployment the"
            " accountant speaks of has at least the clients that train here"
        )
    population = privacy.population or run.data.clients
    if privacy.delta > 1 / population:  # a mechanism that publishes one whole record with probability delta
        whose = f"privacy.population={population}" if privacy.population else f"data.clients={population}"
        return (  # satisfies (0, delta)-DP: delta is meaningful only below one record's share
            f"privacy.delta={privacy.delta:g} is above 1/population ({whose}: 1/{population} = {1 / population:.3g});"
            f" the rule of thumb is delta well below 1/population, e.g. {_below(population):g}"
        )
    noise_cohort = privacy.noise_cohort or run.cohort_size
    if population < noise_cohort:
        whose = f"privacy.population={population}" if privacy.population else f"data.clients={population}"
        return (
            f"privacy.noise_cohort={noise_cohort} exceeds the population ({whose}): a deployment that samples"
            f" {noise_cohort} clients a round has more; say how many with privacy.population={noise_cohort} or more"
        )
    return None


def _below(population: int) -> float:
    """A delta well below 1/population: the power of ten at or under 1/population^1.1."""
    return float(10 ** math.floor(math.log10(population**-1.1)))
