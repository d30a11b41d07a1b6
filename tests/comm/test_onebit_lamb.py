"""1-bit LAMB (Li et al. 2022) against the paper's algorithm written out in numpy on fixed inputs, and in runs: the
``onebit`` uplink on the clients, ``server_optimizer.kind: onebit_lamb`` on the server."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedsim.algorithms.base import MeanUpdate
from fedsim.algorithms.server import OneBitLamb, ServerOptimizerContext, ServerStep
from fedsim.comm.uplink import Blocks
from fedsim.comm.uplink.base import sign_bytes
from fedsim.config import SpellingNote, parse_config
from fedsim.config.server_optimizer import OneBitLambServer
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from tests.conftest import refused, tiny_config

BLOCKS = Blocks(((3, 4), (4,), (5,), (2,)))  # three parameters and a 2-entry buffer
N_PARAMS = 21
TENSORS = ((0, 12), (12, 16), (16, 21))


def _lamb_numpy(cfg: OneBitLambServer, x: np.ndarray, means: list[np.ndarray]) -> list[np.ndarray]:
    """The paper's Algorithm 1 on the server, one tensor at a time, ``x += lr * c * u`` (the mean is an ascent
    direction); ``means[t]`` is the mean update in the warm-up and the mean momentum after it."""
    m, v, fresh = np.zeros(N_PARAMS), np.zeros(N_PARAMS), np.zeros(N_PARAMS)
    coeff, last = np.zeros(len(TENSORS)), np.ones(len(TENSORS))
    out = []
    for t, g in enumerate(means):
        x = x.copy()
        if t < cfg.warmup:
            m = cfg.beta1 * m + (1 - cfg.beta1) * g
            v = cfg.beta2 * v + (1 - cfg.beta2) * g**2
            if t == cfg.warmup - 1:
                fresh = v.copy()
            u = m / (np.sqrt(v) + cfg.eps)
            for i, (a, b) in enumerate(TENSORS):
                ratio = np.clip(np.linalg.norm(x[a:b]) / np.linalg.norm(u[a:b]), cfg.min_coeff, cfg.max_coeff)
                coeff[i] = cfg.coeff_beta * coeff[i] + (1 - cfg.coeff_beta) * ratio
                x[a:b] += cfg.lr * ratio * u[a:b]
        else:
            g = np.where(v > 0, g, 0.0)  # DeepSpeed's exp_avg_mask: the entries the warm-up never moved
            reconstructed = (g - cfg.beta1 * m) / (1 - cfg.beta1)
            fresh = cfg.beta2 * fresh + (1 - cfg.beta2) * reconstructed**2
            m = g
            denom = np.sqrt(v) + cfg.eps
            for i, (a, b) in enumerate(TENSORS):
                factor = np.max(denom[a:b] / (np.sqrt(fresh[a:b]) + cfg.eps))
                factor = np.clip(factor, cfg.factor_min, cfg.factor_max)
                factor = np.clip(factor, last[i] * (1 - cfg.factor_threshold), last[i] * (1 + cfg.factor_threshold))
                last[i] = factor
                x[a:b] += cfg.lr * coeff[i] * factor * m[a:b] / denom[a:b]
        out.append(x)
    return out


def test_the_server_half_is_lamb_then_frozen_variance_times_the_papers_factor() -> None:
    cfg = OneBitLambServer(warmup=3, lr=0.05, max_coeff=2.0, factor_threshold=0.3)
    rng = np.random.default_rng(7)
    x0 = rng.normal(size=N_PARAMS + 2)
    means = [rng.normal(scale=0.1 * (1 + t), size=N_PARAMS) for t in range(7)]
    for g in means[: cfg.warmup]:
        g[5] = 0.0  # an entry no client moves in the warm-up: its 1-bit momentum is masked after it
    expected = _lamb_numpy(cfg, x0[:N_PARAMS], means)
    step = ServerStep(cfg, ServerOptimizerContext.of(tuple(shape for _, shape in BLOCKS), N_PARAMS))
    assert isinstance(step.optimizer, OneBitLamb)
    x, weight = torch.tensor(x0, dtype=torch.float32), 2.5
    for t, g in enumerate(means):
        buffer = rng.normal(size=2)
        total = torch.tensor(np.concatenate([g, buffer]) * weight, dtype=torch.float32)
        before = x[N_PARAMS:].clone()
        step.apply_(x, MeanUpdate(total, weight), N_PARAMS)
        np.testing.assert_allclose(x[:N_PARAMS].numpy(), expected[t], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose((x[N_PARAMS:] - before).numpy(), buffer, rtol=1e-5)  # buffers: the mean
    assert x[5] == float(expected[cfg.warmup - 1][5])  # it stayed where the warm-up left it
    factor = step.state_dict()["factor"]
    assert not torch.equal(factor, torch.ones(3))  # the compressed rounds moved each tensor's factor


def test_a_run_sends_dense_then_one_bit_and_resumes_bit_identically(tmp_path: Path) -> None:
    tree = tiny_config(
        rounds=4,
        clients_per_round=5,
        data__clients=10,
        threads=1,
        checkpoint={"every": 2},
        uplink={"kind": "onebit", "warmup": 2},
        server_optimizer={"kind": "onebit_lamb", "warmup": 2, "lr": 0.3},
    )
    cfg = parse_config(tree)
    whole = Engine(cfg, tmp_path / "whole", tmp_path / "whole.db")
    summary = whole.run()
    assert summary.final_accuracy > 0.3, summary.final_accuracy  # chance: 0.1
    with RunStore.open_readonly(tmp_path / "whole.db") as store:
        (run,) = store.list_runs()
        sent = [r.bytes_up for r in store.rounds(run.run_id)]
    replica = whole.executor.replica
    dense, onebit = 4 * replica.numel + 4, sign_bytes(Blocks(replica.shapes)) + 4  # the update and its weight
    assert sent == [5 * dense, 5 * dense, 5 * onebit, 5 * onebit]
    cut = Engine(cfg, tmp_path / "cut", tmp_path / "cut.db")
    cut.run(after_round=lambda row: row.round == 1)
    resumed = Engine(cfg, tmp_path / "cut", tmp_path / "cut.db", resume=True)
    resumed.run()
    assert torch.equal(resumed.global_state, whole.global_state)  # the server's LAMB state came back


def test_the_old_spelling_loads_with_a_note_and_gives_the_same_weights(tmp_path: Path) -> None:
    """``uplink.kind: onebit_lamb`` (when LAMB's server half was the compressor's) is the onebit uplink with the
    onebit_lamb server optimiser, its old default warm-up of 10 kept."""
    old = tiny_config(rounds=3, threads=1, uplink={"kind": "onebit_lamb", "warmup": 2, "lr": 0.3, "beta": 0.8})
    with pytest.warns(SpellingNote, match=r"uplink\.kind=onebit_lamb is spelled uplink\.kind=onebit with"):
        cfg = parse_config(old)
    assert cfg.uplink.model_dump() == {"kind": "onebit", "factory": None, "beta": 0.8, "warmup": 2}
    opt = cfg.server_optimizer
    assert isinstance(opt, OneBitLambServer) and (opt.lr, opt.beta1, opt.warmup) == (0.3, 0.8, 2)
    with pytest.warns(SpellingNote):
        assert parse_config(tiny_config(uplink={"kind": "onebit_lamb"})).server_optimizer.warmup == 10  # type: ignore[attr-defined]
    new = tiny_config(
        rounds=3,
        threads=1,
        uplink={"kind": "onebit", "warmup": 2, "beta": 0.8},
        server_optimizer={"kind": "onebit_lamb", "warmup": 2, "lr": 0.3, "beta1": 0.8},
    )
    weights = []
    for name, config in (("old", cfg), ("new", parse_config(new))):
        engine = Engine(config, tmp_path / name, tmp_path / f"{name}.db")
        engine.run()
        weights.append(engine.global_state)
    assert torch.equal(weights[0], weights[1])


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            ["uplink.kind=onebit_lamb", "server_optimizer.kind=fedadam"],
            "uplink.kind=onebit_lamb and server_optimizer both set the server's step; give"
            " server_optimizer.kind=onebit_lamb with uplink.kind=onebit",
        ),
        (
            ["server_optimizer.kind=onebit_lamb"],
            "server_optimizer.kind=onebit_lamb reads the clients' 1-bit momenta after its warm-up: set"
            " uplink.kind=onebit, not none",
        ),
        (
            ["server_optimizer.kind=onebit_lamb", "uplink.kind=onebit", "uplink.warmup=3"],
            "server_optimizer.warmup=5 and beta1=0.9 must equal uplink.warmup=3 and beta=0.9",
        ),
        (["downlink.kind=onebit_lamb"], "downlink.kind: Input should be 'none', "),
        (["server_optimizer.kind=onebit_lamb", "server_optimizer.warmup=0"], "server_optimizer.warmup"),
        (
            [
                "server_optimizer.kind=onebit_lamb",
                "uplink.kind=onebit",
                "server_optimizer.min_coeff=3",
                "server_optimizer.max_coeff=2",
            ],
            "server_optimizer: min_coeff <= max_coeff and factor_min <= factor_max",
        ),
    ],
)
def test_bad_onebit_lamb_settings_are_one_line_and_exit_2(
    settings: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in refused(tmp_path, capsys, settings)
