"""Differential privacy as a stage of the round: clients clip (and under local DP noise) their updates before
they are summed; the server noises the sum (central DP) and moves an adaptive clip, after the one all-reduce.

Central DP is DP-FedAvg (McMahan et al. 2018) as pfl-research and Flower's server-side fixed clipping run it:
every client's update counts once (uniform weights), the sum of the clipped updates gets Gaussian noise and is
divided by the expected cohort, a fixed denominator (dividing by the clients that happened to arrive would
leak their number). The noise has standard deviation ``z * C / noise_cohort`` on the average: pfl's noise
cohort, the noise a deployment cohort of ``noise_cohort`` clients needs, for a simulated cohort that is
smaller. The noise is drawn from a generator keyed by (seed, round), so every rank of a pool adds the same
noise to the same global sum and a run is reproducible; a deployment draws it from a secret source.

Two epsilons, never mixed up: ``epsilon`` is the run as executed (its population, its cohort, and the noise
its own sum got, ``z * m / noise_cohort`` clips for a cohort of ``m``); when ``privacy.population`` or
``noise_cohort`` describe a larger deployment, the deployment's epsilon (its population, its noise cohort, the
noise multiplier ``z``) is reported beside it. ``target_epsilon`` and ``max_epsilon`` speak of the deployment
when there is one (that is what simulating its noise is for), else of the run.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from fedsim.config import ConfigError, PrivacyConfig
from fedsim.cores import env_count
from fedsim.privacy.accountant import UNSAMPLED, Accounting, EpsilonCurve, chosen
from fedsim.privacy.audit import FEW_CANARIES, CanaryAudit, too_few
from fedsim.privacy.clip import centred_bits, clip_rows_, next_clip, update_noise_multiplier
from fedsim.privacy.context import PrivacyContext
from fedsim.privacy.mechanism import GAUSSIAN, Gaussian, Mechanism
from fedsim.streams import noise_generator

_CENTRAL, _LOCAL, _COUNT = 0x43, 0x4C, 0x42  # keys of the noise streams, beside the seed and the round


class DifferentialPrivacy:
    """One run's DP: the clip, the noise multipliers and the accountants, and the two halves of the stage."""

    def __init__(
        self,
        privacy: PrivacyConfig,
        context: PrivacyContext,
        initial: Tensor | None = None,
        mechanism: Mechanism = GAUSSIAN,
    ) -> None:
        population = context.population
        assert privacy.enabled and privacy.clip is not None
        self.cfg, self.seed, self.kind, self.mechanism = privacy, context.seed, privacy.kind, mechanism
        self.noise_key = context.seed if context.noise_key is None else context.noise_key  # the noise streams' key
        self.cohort = context.cohort  # the expected cohort: the average's fixed denominator
        self.noise_cohort = privacy.noise_cohort or self.cohort
        self.scale = self.cohort / self.noise_cohort if self.central else 1.0  # the run's noise over the deployment's
        mode = "local" if privacy.local else "central"  # what the accountant amplifies by, from the declaration
        sampling = context.sampling if context.sampled else UNSAMPLED
        accounted = self.cohort if context.sampled else population  # unsampled: a Gaussian over everyone's data
        run = Accounting(mode, "rdp", sampling, population, accounted, privacy.delta, mechanism)  # settled below
        deployed = (privacy.population or population, self.noise_cohort)
        self.deployment: Accounting | None = None
        if self.central and deployed != (population, self.cohort):
            self.deployment = Accounting(mode, "rdp", sampling, *deployed, privacy.delta, mechanism)
        target = self.deployment or run
        self.calibration_loose = 0  # RDP orders the calibration left out
        self.calibration_s: float | None = None  # how long calibrating for target_epsilon took
        if privacy.noise_multiplier is not None:
            self.noise_multiplier = privacy.noise_multiplier
            accountant = chosen(privacy.accountant, target, self.noise_multiplier, context.rounds)
            least = dataclasses.replace(target, accountant=accountant).least_noise(context.rounds)
            if 0 < self.noise_multiplier < least:
                raise ConfigError(
                    f"privacy.noise_multiplier={self.noise_multiplier}: accountant={accountant} handles"
                    f" {least:.3g} and more over {context.rounds} rounds (use rdp or auto, or 0 for clipping"
                    " without noise)"
                )
        else:
            assert privacy.target_epsilon is not None
            if context.progress and env_count("RANK", 0) == 0:  # it takes seconds: say what is going on
                print(
                    f"fedsim: calibrating the noise multiplier for privacy.target_epsilon={privacy.target_epsilon:g}"
                    f" over {context.rounds} rounds ...",
                    flush=True,
                )
            started = time.perf_counter()
            self.noise_multiplier, accountant = self._calibrate(target, privacy.target_epsilon, context.rounds)
            self.calibration_s = time.perf_counter() - started
        run = dataclasses.replace(run, accountant=accountant)
        if self.deployment is not None:
            self.deployment = dataclasses.replace(self.deployment, accountant=accountant)
        adaptive = privacy.adaptive
        if adaptive is not None and not isinstance(mechanism, Gaussian):  # the count and the sum: one Gaussian
            raise ConfigError(
                f"privacy.adaptive: the noised count and the noised sum are accounted as one Gaussian mechanism;"
                f" privacy.kind={privacy.kind} noises with {mechanism.name} (use a fixed clip)"
            )
        self.count_noise = 0.0 if adaptive is None else adaptive.count_noise or self._count_noise()
        self.update_noise = self.noise_multiplier
        if adaptive is not None and self.noise_multiplier > 0:
            try:
                self.update_noise = update_noise_multiplier(self.noise_multiplier, self.count_noise)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        self.clip = privacy.clip
        self.slack = 0.0  # how far past the clip a message the server adds can reach (SecAgg+'s rounding)
        # the run's own sum got scale * z clips of noise; a PLD below its least noise is too large to build
        run_z = self.noise_multiplier * self.scale
        if run.accountant == "pld" and 0 < run_z < run.least_noise(context.rounds):
            run = Accounting(run.kind, "rdp", run.sampling, run.population, run.cohort, run.delta, mechanism)
        self.run_accounting = run
        self.epsilon = EpsilonCurve(run, run_z)
        self.deployment_epsilon = EpsilonCurve(self.deployment, self.noise_multiplier) if self.deployment else None
        if self.deployment_epsilon is not None:  # one record of the rounds released twice, read by both
            self.deployment_epsilon.released_before = self.epsilon.released_before
        self.budget = self.deployment_epsilon or self.epsilon  # what target_epsilon and max_epsilon speak of
        self.stopped_before: int | None = None  # the round max_epsilon stopped the run before
        if not self.allows(1):  # refused while the engine is built: before the run store or out/ hold anything
            whose = "the deployment's" if self.deployment else "this run's"
            raise ConfigError(
                f"privacy.max_epsilon={privacy.max_epsilon:g} is below one round's epsilon ({whose}"
                f" {self.budget(1):.4g} at delta={privacy.delta:g}): the run could not train a round"
            )
        self.audit: CanaryAudit | None = None
        if privacy.audit is not None:
            if initial is None or privacy.audit.canaries >= population:
                raise ConfigError(
                    f"privacy.audit.canaries={privacy.audit.canaries} must be fewer than the {population} clients"
                )
            audit = privacy.audit
            self.audit = CanaryAudit(context.seed, population, audit.canaries, audit.unobserved, initial)
        self.canaries = self.audit.clients if self.audit is not None else frozenset()  # not evaluated as clients

    def _calibrate(self, target: Accounting, epsilon: float, rounds: int) -> tuple[float, str]:
        """The noise multiplier that spends ``epsilon`` over ``rounds`` on ``target``, and the accountant that
        said so: ``auto`` calibrates with pld and, where that needs less noise than a distribution can be built
        for, with rdp."""
        accountant = chosen(self.cfg.accountant, target, None, rounds)
        if self.cfg.accountant == "auto" and accountant == "pld":
            pld = dataclasses.replace(target, accountant="pld")
            if pld.epsilon(pld.least_noise(rounds), rounds) > epsilon:  # the target needs more than the least
                return pld.calibrate(epsilon, rounds), "pld"
            accountant = "rdp"
        settled = dataclasses.replace(target, accountant=accountant)
        z, self.calibration_loose = settled.calibrate_quietly(epsilon, rounds)
        return z, accountant

    def cover_slack(self, slack: float) -> None:
        """Messages reach up to ``slack`` past the clip (SecAgg+'s stochastic rounding, an absolute bound): the
        central noise then covers ``clip + slack``, the sensitivity's true unit, at every clip an adaptive clip
        reaches, so the accountant's noise multiplier holds as stated."""
        self.slack = slack if self.central else 0.0  # local noise is added before the rounding: post-processing

    def _count_noise(self) -> float:
        """The clipped count's default noise: the paper's noise cohort / 20, or, in a cohort too small for that,
        what leaves 90% of the privacy budget to the update (``(2 sigma_b)**-2 = z**-2 / 10``)."""
        return max(self.noise_cohort / 20, 10**0.5 * self.noise_multiplier / 2)

    @property
    def stored_statistics(self) -> str:
        """What the run store keeps of the clients' un-noised statistics: ``withheld`` (nothing: their training
        loss, sample counts and federated evaluation are not released) or ``diagnostics`` (kept, labelled)."""
        return "diagnostics" if self.cfg.diagnostics else "withheld"

    @property
    def central(self) -> bool:
        return not self.cfg.local

    def allows(self, rounds: int) -> bool:
        """Whether ``rounds`` rounds stay within ``max_epsilon``."""
        return self.cfg.max_epsilon is None or self.budget(rounds) <= self.cfg.max_epsilon

    def stop_before(self, round_idx: int, announce: bool) -> bool:
        """Whether the run must stop before round ``round_idx`` (0-based) because it would pass ``max_epsilon``;
        the first time, says why on stderr (``announce``) and keeps it for summary.json."""
        if self.allows(round_idx + 1):
            return False
        if self.stopped_before is None:
            self.stopped_before = round_idx
            whose = "the deployment's" if self.deployment else "this run's"
            if announce:
                print(
                    f"fedsim: stopped before round {round_idx} after {round_idx} rounds: it would spend"
                    f" {whose} epsilon {self.budget(round_idx + 1):.4g} > privacy.max_epsilon={self.cfg.max_epsilon:g}"
                    f" (spent {self.budget(round_idx):.4g})",
                    file=sys.stderr,
                )
        return True

    def describe(self) -> str:
        """One line for the log: the noise, and whose epsilon each figure is."""
        what = f"DP {self.kind}: clip {self.clip:g}, noise multiplier {self.noise_multiplier:.4g}"
        if self.slack:
            what += f" on clip + {self.slack:.3g} (SecAgg+'s rounding)"
        if self.cfg.target_epsilon is not None:
            took = f" in {self.calibration_s:.1f} s" if self.calibration_s is not None else ""
            what += f" (calibrated for target_epsilon={self.cfg.target_epsilon:g}{took})"
        a = self.run_accounting
        if a.sampling == UNSAMPLED:  # the trace decides who reports: no amplification
            what += f"; epsilon is this run's ({a.population:,} clients; releases of {self.cohort:,} updates the"
            what += f" trace clock chooses, unsampled; {a.neighbours})"
        else:
            what += f"; epsilon is this run's ({a.population:,} clients, {a.cohort:,} a round, {a.neighbours})"
        how = "privacy loss distributions" if a.accountant == "pld" else "Renyi DP"
        what += f", accounted by {a.accountant} ({how}{', chosen by auto' if self.cfg.accountant == 'auto' else ''})"
        if self.deployment is not None:
            d = self.deployment
            what += f" with its sum's noise multiplier {self.epsilon.noise_multiplier:.4g}; deployment_epsilon is"
            what += f" the simulated deployment's ({d.population:,} clients, {d.cohort:,} a round)"
        elif self.central and a.sampling != UNSAMPLED:  # a small cohort's noise is large: how a deployment's is
            what += "; privacy.noise_cohort and privacy.population simulate a large deployment's noise instead"
        return what

    def announce(self, verbose: bool) -> None:
        """Print :meth:`describe` (``verbose``) and, always, what the accounting warns of."""
        if verbose:
            print(f"fedsim: {self.describe()}", flush=True)
        for line in self.warnings():
            print(f"fedsim: warning: {line}", file=sys.stderr, flush=True)

    def warnings(self) -> list[str]:
        """What the log should say once about the accounting: a looser RDP bound."""
        curves = [self.epsilon] + ([self.deployment_epsilon] if self.deployment_epsilon else [])
        loose = self.calibration_loose + sum(curve.loose_orders for curve in curves)
        lines = []
        if loose:
            lines.append(
                f"the RDP accountant left out {loose} orders whose series did not converge, so its epsilon is a"
                " looser (larger) bound there; privacy.accountant=pld computes it tightly"
            )
        if self.audit is not None and len(self.audit.clients) < FEW_CANARIES:
            lines.append(too_few(len(self.audit.clients)))
        return lines

    # ------------------------------------------------------------------------------------- the clients' half

    def plant_(self, cids: list[int], rows: Mapping[str, Tensor]) -> None:
        """The audit's canaries among the K clients send their direction at the clip instead of their update."""
        if self.audit is not None:
            self.audit.plant_(cids, rows["delta"], self.clip)

    def clip_(self, rows: Mapping[str, Tensor]) -> Tensor:
        """Clip the K clients' update rows in place; returns (K,) centred bits on the device (no host read):
        +1/2 for each client that was within the clip already, else -1/2, what adaptive clipping sums."""
        return centred_bits(clip_rows_(rows, self.clip), self.clip)

    def clip_decoded_(self, rows: Mapping[str, Tensor], uplinks: list[dict[str, Tensor]]) -> None:
        """Clip what the server will decode: after an uplink compressor replaced each row by its decoded
        message, scale any message past the clip back to it (a scalar on the message's own scale: the same
        bytes), and hand the part cut off to the client's error feedback, when it keeps one, to send later. Every
        message the server adds then has norm at most ``C``, whatever the compressor did to the clipped update."""
        delta = rows["delta"]
        before = delta.clone()
        clip_rows_({"delta": delta}, self.clip)
        cut = before - delta
        for k, state in enumerate(uplinks):
            if "residual" in state:  # error feedback: the new tensor, never the store's in place
                state["residual"] = state["residual"] + cut[k].to(state["residual"].device)

    def local_noise_(self, round_idx: int, cids: list[int], rows: Mapping[str, Tensor]) -> None:
        """Under local DP, add each client's own Gaussian noise (``noise_multiplier * clip``) to its rows."""
        if not self.cfg.local or self.noise_multiplier == 0:
            return
        std = self.noise_multiplier * self.clip
        device = next(iter(rows.values())).device
        for k, cid in enumerate(cids):
            generator = noise_generator(device, self.noise_key, round_idx, _LOCAL, cid)
            for block in rows.values():
                self.mechanism.noise_(block[k], std, generator)

    # ------------------------------------------------------------------------------------- the server's half

    def release_(self, sums: Mapping[str, Tensor], round_idx: int) -> None:
        """Turn the round's global sums into what DP releases, in place: under central DP noise on the summed
        update and the expected cohort as the denominator; then move an adaptive clip by the noised sum of the
        centred bits (``sums["unclipped"]``)."""
        if self.central:
            update = sums["delta"]
            if self.update_noise > 0:
                generator = noise_generator(update.device, self.noise_key, round_idx, _CENTRAL)
                self.mechanism.noise_(update, self.update_noise * (self.clip + self.slack) * self.scale, generator)
            sums["weight"].fill_(float(self.cohort))
        adaptive = self.cfg.adaptive
        if adaptive is not None:
            count_generator = noise_generator(torch.device("cpu"), self.noise_key, round_idx, _COUNT)
            count_noise = float(torch.randn((), generator=count_generator)) * self.count_noise * self.scale
            share = (float(sums["unclipped"]) + count_noise) / self.cohort + 0.5  # one host read a round
            self.clip = next_clip(self.clip, share, adaptive.target_quantile, adaptive.lr)

    # ------------------------------------------------------------------------------------- records

    def round_metrics(self, rounds: int) -> dict[str, float | None]:
        """What the run store records after ``rounds`` rounds: epsilon spent (None: unbounded, no noise), the
        deployment's beside it when one is simulated, and the clip the next round uses."""
        metrics = {"epsilon": _finite(self.epsilon(rounds)), "clip": self.clip}
        if self.deployment_epsilon is not None:
            metrics["deployment_epsilon"] = _finite(self.deployment_epsilon(rounds))
        return metrics

    def released_again(self, rounds: Sequence[int]) -> None:
        """Rounds this run released before a crash and will train again from its checkpoint: under a system
        noise seed the retrained rounds get fresh noise, so each of them is released once more and accounted so
        (:meth:`EpsilonCurve.releases`); a run-seeded replay releases the same values again, which costs nothing."""
        if self.cfg.noise_seed != "system":
            return
        for index in rounds:
            self.released_before[index] = self.released_before.get(index, 0) + 1

    @property
    def released_before(self) -> dict[int, int]:
        return self.epsilon.released_before

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"clip": self.clip}
        if self.released_before:  # round index -> releases before the timeline that wrote this checkpoint
            state["released_before"] = {str(k): v for k, v in sorted(self.released_before.items())}
        return state

    def tensors(self) -> dict[str, Tensor]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any], tensors: Mapping[str, Tensor] | None = None) -> None:
        self.clip = float(state["clip"])
        before = {int(k): int(v) for k, v in state.get("released_before", {}).items()}
        for curve in (self.epsilon, self.deployment_epsilon):
            if curve is not None:
                curve.released_before = before  # one dict: the deployment's epsilon counts the same releases

    def summary(self, rounds: int, final: Tensor | None = None) -> dict[str, Any]:
        """summary.json's ``privacy``: the run's epsilon after ``rounds`` and every input its accountant took
        (epsilon is dp-accounting's event of ``GaussianDpEvent(effective_noise_multiplier / sensitivity)``,
        sampled as ``sampling`` says), the deployment's when one is simulated, and with an audit the canaries'
        epsilon estimate from the ``final`` model."""
        a = self.run_accounting
        fields: dict[str, Any] = {
            "kind": self.kind,
            "mechanism": self.mechanism.name,
            "epsilon": self.epsilon(rounds),
            "delta": a.delta,
            "noise_multiplier": self.noise_multiplier,
            "effective_noise_multiplier": self.epsilon.noise_multiplier,
            "update_noise_multiplier": self.update_noise,
            "clip": self.clip,
            "adaptive": self.cfg.adaptive is not None,
            "sampling": a.sampling,
            "sampling_rate": a.sampling_rate,
            "population": a.population,
            "cohort": a.cohort,
            "trained_cohort": self.cohort,
            "noise_cohort": self.noise_cohort,
            "rounds": rounds,
            "accountant": a.accountant,
            "accountant_setting": self.cfg.accountant,  # auto: pld where its distribution can be built
            "client_statistics": self.stored_statistics,  # the clients' un-noised losses and samples in the store
            "noise_seed": self.cfg.noise_seed,  # system: drawn from the OS, so the run cannot be replayed
            "released_again": sum(self.released_before.values()),  # releases a resume made again: accounted
            "neighbours": a.neighbours,
            "sensitivity": a.sensitivity,
        }
        if self.slack:  # each message's sensitivity, and the noise's unit, is clip + slack
            fields["sensitivity_slack"] = self.slack
        if self.stopped_before is not None:
            fields["stopped_before_round"] = self.stopped_before  # by max_epsilon; final_accuracy is that model's
        if self.cfg.adaptive is not None:  # the centred bits move by half an update's sensitivity, in clients
            fields |= {"count_noise": self.count_noise, "count_sensitivity": a.sensitivity / 2}
        if self.audit is not None and final is not None:
            fields["audit"] = self.audit.summary(final, a.delta)
        if self.deployment is not None and self.deployment_epsilon is not None:
            d = self.deployment
            fields["deployment"] = {
                "population": d.population,
                "noise_cohort": d.cohort,
                "sampling_rate": d.sampling_rate,
                "noise_multiplier": self.noise_multiplier,
                "neighbours": d.neighbours,
                "sensitivity": d.sensitivity,
                "accountant": d.accountant,
                "epsilon": self.deployment_epsilon(rounds),
            }
        return fields


def _finite(epsilon: float) -> float | None:
    return epsilon if math.isfinite(epsilon) else None
