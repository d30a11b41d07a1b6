"""A DP mechanism of your own: a Laplace mechanism registered here as a privacy kind. The accountant tells it
each release's relation and L2 sensitivity, it states its own L1 sensitivity (sqrt(d) times the L2 one for an
L2-clipped update of d entries), and the run's epsilon matches the Laplace mechanism's tight (epsilon, delta)
curve, worked out here by integrating the two output densities."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import dp_accounting
import numpy as np
import pytest
import torch
from torch import Tensor

from fedsim.config import PRIVACY, ConfigError, PrivacyConfig, parse_config, register_privacy
from fedsim.privacy.context import PrivacyContext
from fedsim.privacy.dp import DifferentialPrivacy
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config


class Laplace:
    """Laplace noise of scale ``b`` on every coordinate; its event's parameter is noise over L1 sensitivity."""

    name = "laplace"

    def __init__(self, dim: int) -> None:
        self.dim = dim

    def noise_(self, x: Tensor, scale: float, generator: torch.Generator) -> None:
        u = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype) - 0.5
        x.add_(-scale * torch.sign(u) * torch.log1p(-2 * u.abs()))

    def event(self, noise_over_sensitivity: float) -> Any:
        return dp_accounting.LaplaceDpEvent(noise_over_sensitivity / math.sqrt(self.dim))

    def pld(self, noise_over_sensitivity: float, sampling_prob: float) -> Any:
        return None  # the accountant composes the event


class LaplaceDP(PrivacyConfig):
    kind: Literal["test_laplace"] = "test_laplace"


@pytest.fixture
def registered() -> Iterator[None]:
    @register_privacy(LaplaceDP)
    def laplace(settings: LaplaceDP, context: PrivacyContext, initial: Tensor | None) -> DifferentialPrivacy:
        assert initial is not None
        return DifferentialPrivacy(settings, context, initial, mechanism=Laplace(initial.numel()))

    yield
    PRIVACY.unregister("test_laplace")


def laplace_delta(epsilon: float, epsilon0: float) -> float:
    """delta(epsilon) of the Laplace mechanism with privacy loss ``epsilon0`` (scale 1 / epsilon0, sensitivity
    1): the integral of max(0, p(x) - e^epsilon q(x)) over the outputs, p and q its densities at 0 and 1."""
    b = 1.0 / epsilon0
    x = np.linspace(-60 * b, 1 + 60 * b, 2_000_001)
    p, q = np.exp(-np.abs(x) / b) / (2 * b), np.exp(-np.abs(x - 1) / b) / (2 * b)
    return float(np.trapezoid(np.maximum(0.0, p - math.exp(epsilon) * q), x))


def laplace_epsilon(delta: float, epsilon0: float) -> float:
    lo, hi = 0.0, epsilon0
    for _ in range(60):  # delta(epsilon) falls as epsilon grows
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if laplace_delta(mid, epsilon0) > delta else (lo, mid)
    return hi


def test_a_laplace_mechanism_is_accounted_by_its_own_sensitivity(tmp_path: Path, registered: None) -> None:
    d = 650  # the logistic model on digits: 64 x 10 weights and 10 biases
    z = math.sqrt(d) / 2.0  # epsilon0 = sqrt(d) C / (z C) = 2 for one release of sensitivity 1 (add-or-remove)
    privacy = {"kind": "test_laplace", "clip": 1.0, "noise_multiplier": z, "accountant": "pld", "delta": 1e-5}
    tree = tiny_config(rounds=1, clients_per_round=10, sampling="poisson", privacy=privacy)  # q = 1: no sampling
    engine = Engine(parse_config(tree), tmp_path / "lap", tmp_path / "lap" / "runs.db")
    assert engine.executor.replica.numel == d and engine.privacy.mechanism.name == "laplace"  # type: ignore[union-attr]
    engine.run()
    summary = json.loads((tmp_path / "lap" / "summary.json").read_text())["privacy"]
    assert summary["mechanism"] == "laplace" and summary["neighbours"] == "add-or-remove-one"
    expected = laplace_epsilon(1e-5, 2.0)
    assert expected == pytest.approx(2.0 + 2 * math.log(1 - 1e-5), abs=1e-4)  # the closed form agrees
    assert summary["epsilon"] == pytest.approx(expected, rel=1e-3)


def test_adaptive_clipping_beside_another_mechanism_is_one_error(tmp_path: Path, registered: None) -> None:
    privacy = {"kind": "test_laplace", "clip": 1.0, "noise_multiplier": 5.0, "adaptive": {}}
    with pytest.raises(ConfigError, match=r"accounted as one Gaussian mechanism; privacy\.kind=test_laplace noises"):
        Engine(parse_config(tiny_config(privacy=privacy)), tmp_path / "a", tmp_path / "a" / "runs.db")


def test_the_gaussian_is_the_built_in_mechanism(tmp_path: Path) -> None:
    privacy = {"kind": "central", "clip": 1.0, "noise_multiplier": 1.0}
    engine = Engine(parse_config(tiny_config(rounds=1, privacy=privacy)), tmp_path / "g", tmp_path / "g" / "r.db")
    assert engine.privacy.mechanism.name == "gaussian"  # type: ignore[union-attr]
