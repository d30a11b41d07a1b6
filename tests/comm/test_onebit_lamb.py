"""1-bit LAMB (Li et al. 2022) against the paper's algorithm written out in numpy on fixed inputs, and in runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedsim.comm.uplink import Blocks
from fedsim.comm.uplink.base import sign_bytes
from fedsim.comm.uplink.onebit_lamb import OneBitLamb, OneBitLambConfig
from fedsim.config import parse_config
from fedsim.runstore import RunStore
from fedsim.sim.rounds.engine import Engine
from tests.conftest import refused, tiny_config

BLOCKS = Blocks(((3, 4), (4,), (5,), (2,)))  # three parameters and a 2-entry buffer
N_PARAMS = 21
TENSORS = ((0, 12), (12, 16), (16, 21))


def _lamb_numpy(cfg: OneBitLambConfig, x: np.ndarray, means: list[np.ndarray]) -> list[np.ndarray]:
    """The paper's Algorithm 1 on the server, one tensor at a time, ``x += lr * c * u`` (the mean is an ascent
    direction); ``means[t]`` is the mean update in the warm-up and the mean momentum after it."""
    m, v, fresh = np.zeros(N_PARAMS), np.zeros(N_PARAMS), np.zeros(N_PARAMS)
    coeff, last = np.zeros(len(TENSORS)), np.ones(len(TENSORS))
    out = []
    for t, g in enumerate(means):
        x = x.copy()
        if t < cfg.warmup:
            m = cfg.beta * m + (1 - cfg.beta) * g
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
            reconstructed = (g - cfg.beta * m) / (1 - cfg.beta)
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
    cfg = OneBitLambConfig(warmup=3, lr=0.05, max_coeff=2.0, factor_threshold=0.3)
    rng = np.random.default_rng(7)
    x0 = rng.normal(size=N_PARAMS + 2)
    means = [rng.normal(scale=0.1 * (1 + t), size=N_PARAMS) for t in range(7)]
    for g in means[: cfg.warmup]:
        g[5] = 0.0  # an entry no client moves in the warm-up: its 1-bit momentum is masked after it
    expected = _lamb_numpy(cfg, x0[:N_PARAMS], means)
    server = OneBitLamb(BLOCKS, cfg).server
    x, weight = torch.tensor(x0, dtype=torch.float32), 2.5
    for t, g in enumerate(means):
        buffer = rng.normal(size=2)
        delta = torch.tensor(np.concatenate([g, buffer]) * weight, dtype=torch.float32)
        sums = {"delta": delta, "weight": torch.tensor([weight])}
        server.step_(x, sums, N_PARAMS, t)
        x += sums["delta"] / weight  # FedAvg's server: the mean
        np.testing.assert_allclose(x[:N_PARAMS].numpy(), expected[t], rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(sums["delta"][N_PARAMS:].numpy(), buffer * weight, rtol=1e-6)  # averaged
    assert x[5] == float(expected[cfg.warmup - 1][5])  # it stayed where the warm-up left it
    factor = server.state_dict()["factor"]
    assert not torch.equal(factor, torch.ones(3))  # the compressed rounds moved each tensor's factor


def test_a_run_sends_dense_then_one_bit_and_resumes_bit_identically(tmp_path: Path) -> None:
    tree = tiny_config(
        rounds=4,
        clients_per_round=5,
        data__clients=10,
        threads=1,
        checkpoint={"every": 2},
        uplink={"kind": "onebit_lamb", "warmup": 2, "lr": 0.3},
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


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            ["uplink.kind=onebit_lamb", "algorithm.name=scaffold"],
            "uplink.kind=onebit_lamb turns the clients' mean into its own server step, which algorithm.name=scaffold",
        ),
        (
            ["uplink.kind=onebit_lamb", "server_optimizer.kind=fedadam"],
            "server_optimizer.kind=fedadam: uplink.kind=onebit_lamb makes the server's step itself",
        ),
        (["downlink.kind=onebit_lamb"], "downlink.kind=onebit_lamb steps the model on the server"),
        (["uplink.kind=onebit_lamb", "uplink.warmup=0"], "uplink.warmup"),
        (["uplink.kind=onebit_lamb", "uplink.min_coeff=3", "uplink.max_coeff=2"], "min_coeff <= max_coeff"),
    ],
)
def test_bad_onebit_lamb_settings_are_one_line_and_exit_2(
    settings: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert message in refused(tmp_path, capsys, settings)
