"""fedsim's clients under Flower's own SecAgg+ (``secaggplus_mod`` and ``SecAggPlusWorkflow``) aggregate what
fedsim's simulated protocol aggregates from the same client updates, within the quantization error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedsim.api.launch import final_weights
from fedsim.config import ConfigError, local_training, parse_config
from fedsim.privacy.secagg import secagg_max_weight
from tests.conftest import RunFactory
from tests.server.test_flower_parity import parity_tree

pytest.importorskip("ray", reason="Flower's Simulation Runtime needs flwr[simulation]")
secure = pytest.importorskip("fedsim.flower.secagg")

SECAGG = {"kind": "secagg_plus", "num_shares": 5, "reconstruction_threshold": 3}


def _tree() -> dict[str, object]:
    return {**parity_tree("fedavg"), "secagg": SECAGG}


@pytest.mark.slow
def test_flowers_secagg_workflow_over_fedsims_clients_matches_fedsims_simulated_protocol(
    run_engine: RunFactory, tmp_path: Path
) -> None:
    from flwr.simulation import run_simulation

    tree = _tree()
    cfg = parse_config(tree)
    simulated = run_engine(tree)
    plain = run_engine({**tree, "secagg": {}})
    strategies: list[object] = []
    run_simulation(
        server_app=secure.secure_server_app(cfg, tmp_path / "flower", strategies),
        client_app=secure.secure_client_app(cfg),
        num_supernodes=6,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": {"num_cpus": 2, "include_dashboard": False, "log_to_driver": False},
        },
    )
    (strategy,) = strategies
    assert list(strategy.aggregates) == [1]  # type: ignore[attr-defined]  # Flower unmasked round 1
    flower = final_weights(tmp_path / "flower")
    fedsim_secure, fedsim_plain = final_weights(simulated.out_dir), final_weights(plain.out_dir)
    initial = secure.FlowerWorker.build(cfg).replica.flat
    assert float((fedsim_plain - initial).abs().max()) > 1e-3  # the round trained: the test can fail
    # one quantization step per client over the total weight, for each protocol's own stochastic rounding
    weights = [secure.FlowerWorker.build(cfg).weight(c) for c in range(6)]
    step = (
        6
        * 2
        * 8.0
        / 2**22
        * secagg_max_weight(cfg.secagg, local_training(cfg.algorithm).weighting == "uniform")
        / sum(weights)
    )
    assert float((flower - fedsim_plain).abs().max()) <= step * 1.01
    assert float((flower - fedsim_secure).abs().max()) <= 2 * step * 1.01
    assert not np.array_equal(flower.numpy(), fedsim_plain.numpy())  # Flower quantized: not the plain sum
    torch.testing.assert_close(flower, fedsim_secure, rtol=0, atol=2 * step)


def test_what_the_flower_secagg_apps_cannot_run_is_refused() -> None:
    with pytest.raises(ConfigError, match="train every client each round"):
        secure.secure_client_app(parse_config({**_tree(), "clients_per_round": 3}))
    with pytest.raises(ConfigError, match=r"need secagg\.kind: secagg_plus"):
        secure.secure_server_app(parse_config({**_tree(), "secagg": {}}), Path("unused"))
