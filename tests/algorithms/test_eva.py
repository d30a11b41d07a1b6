"""Eva against its paper's formula written directly: the damped Kronecker-vector curvature inverted as a matrix,
KL clipping and SGD with momentum, on a small layer; and Eva as a client optimiser in a run."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedsim.algorithms.eva import EvaStep, preconditioned
from fedsim.config import ConfigError, local_training, parse_config
from fedsim.config.client_optimizer import EvaClientOptimizer
from fedsim.models.replica import Replica
from tests.conftest import RunFactory, tiny_config

DAMPING, KL_CLIP, DECAY, MOMENTUM, WD, LR = 0.03, 0.001, 0.95, 0.9, 1e-3, 0.1


def test_preconditioned_gradient_is_the_damped_kronecker_inverse() -> None:
    gen = torch.Generator().manual_seed(0)
    grad, a, g = (torch.randn(*s, generator=gen, dtype=torch.float64) for s in ((4, 6), (6,), (4,)))
    curvature = torch.kron(torch.outer(g, g), torch.outer(a, a)) + DAMPING * torch.eye(24, dtype=torch.float64)
    want = torch.linalg.solve(curvature, grad.flatten()).view(4, 6)  # row-major vec: (B (x) A) vec(X) = vec(B X A^T)
    torch.testing.assert_close(preconditioned(grad, a, g, DAMPING), want)


def reference_steps(model: nn.Linear, x: torch.Tensor, y: torch.Tensor, steps: int) -> torch.Tensor:
    """Eva written out: vectors, explicit inverse, KL clip, torch.optim.SGD's momentum and weight decay."""
    w = torch.cat([model.weight.detach(), model.bias.detach()[:, None]], 1).double().clone()
    a_run = g_run = None
    buf = torch.zeros_like(w)
    ones = torch.ones(x.shape[0], 1, dtype=torch.float64)
    inputs = torch.cat([x.double(), ones], 1)
    for step in range(steps):
        w_leaf = w.clone().requires_grad_(True)
        out = inputs @ w_leaf.T
        out.retain_grad()
        F.cross_entropy(out, y).backward()
        grad, a, g = w_leaf.grad, inputs.mean(0), out.grad.mean(0)  # type: ignore[union-attr]
        a_run = a if step == 0 else DECAY * a_run + (1 - DECAY) * a  # type: ignore[operator]
        g_run = g if step == 0 else DECAY * g_run + (1 - DECAY) * g  # type: ignore[operator]
        size = grad.numel()  # type: ignore[union-attr]
        curvature = torch.kron(torch.outer(g_run, g_run), torch.outer(a_run, a_run))
        p = torch.linalg.solve(curvature + DAMPING * torch.eye(size, dtype=torch.float64), grad.flatten())  # type: ignore[union-attr]
        p = p.view_as(w)
        nu = min(1.0, math.sqrt(KL_CLIP / float((p * grad).sum() * LR**2)))
        d = nu * p + WD * w
        buf = MOMENTUM * buf + d
        w = w - LR * buf
    return w


def test_eva_steps_are_the_direct_implementation_on_a_small_layer() -> None:
    torch.manual_seed(0)
    model = nn.Linear(5, 3)
    x, y = torch.randn(32, 5), torch.randint(0, 3, (32,))
    want = reference_steps(model, x, y, steps=4)
    replica = Replica(model)
    eva = {"kind": "eva", "momentum": MOMENTUM, "weight_decay": WD, "damping": DAMPING, "kl_clip": KL_CLIP}
    opt = local_training(
        parse_config(tiny_config(algorithm__lr=LR, algorithm__client_optimizer={**eva, "decay": DECAY})).algorithm
    )
    assert isinstance(opt.client_optimizer, EvaClientOptimizer)
    step = EvaStep(replica, opt.client_optimizer, LR, None)
    for _ in range(4):
        replica.take_gradients(replica.gradients(F.cross_entropy(model(x), y)))
        step()
    step.close()
    got = torch.cat([model.weight.detach(), model.bias.detach()[:, None]], 1).double()
    torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert not model._forward_hooks  # close() took its hooks off the layer


def test_eva_trains_a_run_and_keeps_its_vectors_per_client(run_engine: RunFactory) -> None:
    tree = tiny_config(
        rounds=4,
        clients_per_round=10,
        model={"kind": "cnn", "norm": "group", "groups": 4},
        algorithm__client_optimizer={"kind": "eva", "momentum": 0.9, "state": "client"},
        algorithm__lr=0.05,
    )
    engine = run_engine(tree)
    assert engine.last_eval is not None and engine.last_eval.accuracy > 0.5
    state = engine.store.get(0)
    assert state is not None and {"optimizer.eva_a", "optimizer.eva_g", "optimizer.momentum"} <= state.keys()
    assert float(state["optimizer.eva_steps"]) > 4  # more than one round's steps: carried from round to round


def test_eva_settings_belong_to_eva() -> None:
    with pytest.raises(ConfigError, match=r"unknown key 'algorithm\.client_optimizer\.damping'; allowed here: kind"):
        parse_config(tiny_config(algorithm__client_optimizer={"damping": 0.1}))
    with pytest.raises(ConfigError, match=r"unknown key 'algorithm\.client_optimizer\.momentum'; allowed here: kind"):
        parse_config(tiny_config(algorithm__client_optimizer={"kind": "adam", "momentum": 0.9}))
