"""A DP mechanism: how a release is noised, and the event the accountant composes for one release.

A release (the noised sum under central DP, each client's noised update under local DP) has a neighbouring
relation and an L2 sensitivity in units of the clip, which the accountant works out from the run
(:class:`fedsim.privacy.accountant.Accounting`: add-or-remove-one, 1 clip; replace-one, 2 clips). It adds
noise of scale ``noise_multiplier * clip`` with the mechanism's :meth:`Mechanism.noise_` and asks the
mechanism for :meth:`Mechanism.event` at ``noise_multiplier / sensitivity``: the mechanism turns that into the
dp-accounting event of one release, stating any sensitivity of its own (a Laplace mechanism's is in L1, at most
``sqrt(d)`` times the L2 one). :data:`GAUSSIAN` is the built-in one; a mechanism of your own is handed to
:class:`fedsim.privacy.dp.DifferentialPrivacy` by the builder of your own privacy kind.
"""

from __future__ import annotations

from typing import Any, Protocol

import dp_accounting
import torch
from dp_accounting.pld import privacy_loss_distribution
from torch import Tensor

# The privacy loss's grid: pessimistic rounding keeps the bound an upper bound; 1e-4 (dp-accounting's default)
# moved the README's 40-round epsilon by 6e-8 relative and took ten times as long a round.
PLD_STEP = 1e-3


class Mechanism(Protocol):
    name: str

    def noise_(self, x: Tensor, scale: float, generator: torch.Generator) -> None:
        """Add noise of ``scale`` (the noise multiplier times the clip) to ``x`` in place, drawn from
        ``generator`` (keyed by the seed and the round: every rank adds the same noise)."""
        ...

    def event(self, noise_over_sensitivity: float) -> Any:
        """One release as a dp-accounting event, its noise scale ``noise_over_sensitivity`` times the release's
        L2 sensitivity."""
        ...

    def pld(self, noise_over_sensitivity: float, sampling_prob: float) -> Any:
        """The privacy loss distribution of one (Poisson-sampled) release, or None: the accountant then composes
        :meth:`event` itself."""
        ...


class Gaussian:
    """The Gaussian mechanism: ``N(0, scale^2)`` on every coordinate."""

    name = "gaussian"

    def noise_(self, x: Tensor, scale: float, generator: torch.Generator) -> None:
        x.add_(torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype), alpha=scale)

    def event(self, noise_over_sensitivity: float) -> Any:
        return dp_accounting.GaussianDpEvent(noise_over_sensitivity)

    def pld(self, noise_over_sensitivity: float, sampling_prob: float) -> Any:
        return privacy_loss_distribution.from_gaussian_mechanism(
            noise_over_sensitivity, sampling_prob=sampling_prob, value_discretization_interval=PLD_STEP
        )


GAUSSIAN = Gaussian()
