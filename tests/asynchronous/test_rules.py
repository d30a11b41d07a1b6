"""FedBuff's buffered step and FedAsync's mixing against their papers' update rules written out in numpy on a
fixed sequence of arrivals; the staleness functions against their closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedsim.algorithms.fedavg import FedAvg, FedAvgConfig
from fedsim.algorithms.server import ServerOptimizerContext, ServerStep
from fedsim.asynchronous import Buffer, fedasync_mix_, staleness_weight
from fedsim.config import SERVER_OPTIMIZERS

# arrivals: (delta from the client's start model, its aggregation weight, its staleness)
ARRIVALS = [
    (np.array([1.0, -2.0, 0.5]), 1.0, 0),
    (np.array([0.0, 4.0, -1.0]), 1.0, 3),
    (np.array([2.0, 2.0, 2.0]), 1.0, 8),
]


def test_staleness_functions_are_the_closed_forms() -> None:
    assert staleness_weight("constant", 9) == 1.0
    assert staleness_weight("polynomial", 3, a=0.5) == 0.5  # 1 / sqrt(1 + 3)
    assert staleness_weight("polynomial", 7, a=1.0) == 0.125
    assert staleness_weight("hinge", 4, a=0.5, b=4) == 1.0
    assert staleness_weight("hinge", 6, a=0.5, b=4) == 0.5  # 1 / (0.5 * 2 + 1)
    with pytest.raises(ValueError, match="staleness must be >= 0"):
        staleness_weight("constant", -1)


def _fedavg_step(state: torch.Tensor, sums: dict[str, torch.Tensor], lr: float = 1.0) -> None:
    """FedAvg's server half and the plain server step at ``lr``, as the engine applies a buffer."""
    step = ServerStep(SERVER_OPTIMIZERS.parse({"kind": "sgd", "lr": lr}), ServerOptimizerContext((len(state),)))
    step.step_(FedAvg(FedAvgConfig(kind="fedavg")), state, sums, len(state))


def test_fedbuff_steps_with_the_mean_of_staleness_scaled_deltas() -> None:
    x = np.array([0.5, 0.5, 0.5])
    server_lr = 0.7
    # Nguyen et al., Algorithm 1: x <- x + eta_g * (1 / K) * sum_k s(tau_k) * Delta_k, s = 1 / sqrt(1 + tau)
    expected = x + server_lr * sum(d / np.sqrt(1 + s) for d, _, s in ARRIVALS) / len(ARRIVALS)
    state = torch.tensor(x, dtype=torch.float32)
    buffer = Buffer(3, torch.device("cpu"))
    for delta, weight, s in ARRIVALS:
        buffer.add_(torch.tensor(delta, dtype=torch.float32), weight, staleness_weight("polynomial", s, a=0.5))
    assert buffer.count == 3
    _fedavg_step(state, buffer.sums(), server_lr)
    assert np.allclose(state.numpy(), expected, atol=1e-6)
    buffer.clear_()
    assert buffer.count == 0 and buffer.weight == 0.0 and float(buffer.delta.abs().sum()) == 0.0


def test_fedbuff_with_sample_weights_is_their_weighted_mean() -> None:
    weights = [10.0, 30.0, 60.0]
    expected = sum(w * d for (d, _, _), w in zip(ARRIVALS, weights, strict=True)) / 100.0
    state = torch.zeros(3)
    buffer = Buffer(3, torch.device("cpu"))
    for (delta, _, _), w in zip(ARRIVALS, weights, strict=True):
        buffer.add_(torch.tensor(delta, dtype=torch.float32), w, staleness_weight("constant", 0))
    _fedavg_step(state, buffer.sums())
    assert np.allclose(state.numpy(), expected, atol=1e-6)


def test_fedasync_mixes_each_local_model_in_at_alpha_times_its_staleness_weight() -> None:
    alpha = 0.6
    x = np.array([1.0, 0.0, -1.0])
    locals_ = [np.array([3.0, 1.0, 0.0]), np.array([-1.0, 2.0, 2.0]), np.array([0.0, 0.0, 5.0])]
    stale = [0, 2, 7]
    expected = x.copy()
    for local, s in zip(locals_, stale, strict=True):  # Xie et al.: x_t = (1 - a_t) x_{t-1} + a_t x_new
        a_t = alpha * (1.0 if s <= 4 else 1.0 / (0.5 * (s - 4) + 1.0))
        expected = (1 - a_t) * expected + a_t * local
    state = torch.tensor(x, dtype=torch.float32)
    for local, s in zip(locals_, stale, strict=True):
        fedasync_mix_(state, torch.tensor(local, dtype=torch.float32), alpha, staleness_weight("hinge", s, 0.5, 4))
    assert np.allclose(state.numpy(), expected, atol=1e-6)
