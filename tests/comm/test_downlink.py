"""The broadcast model compressed with the server's error feedback: what clients hold, what the ledger charges,
and checkpoint and resume."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from fedsim.api.launch import final_weights
from fedsim.comm.downlink import Downlink
from fedsim.comm.uplink import Blocks
from fedsim.comm.uplink.base import sign_bytes
from fedsim.comm.uplink.ef_sign import EFSign
from fedsim.config import parse_config
from fedsim.sim.rounds.engine import Engine
from tests.conftest import tiny_config


def test_clients_hold_the_server_model_minus_what_error_feedback_still_owes() -> None:
    blocks = Blocks(((4, 5), (5,)))
    start = torch.zeros(25)
    downlink = Downlink(EFSign(blocks), seed=0, global_state=start)
    g = torch.Generator().manual_seed(0)
    server = start.clone()
    for r in range(6):
        server += torch.randn(25, generator=g)
        downlink.begin_round([r, r + 1])
        downlink.broadcast_(server, r)
        torch.testing.assert_close(downlink.model + downlink.state["residual"], server, rtol=0, atol=1e-5)
        assert downlink.message_bytes == sign_bytes(blocks)
    assert downlink.model_bytes(6, dense=100) == sign_bytes(blocks)  # trained the round before: one message
    assert downlink.model_bytes(3, dense=100) == 100  # missed it: the whole model


def _tree(**overrides: Any) -> dict[str, Any]:
    tree = {"rounds": 4, "clients_per_round": 10, "threads": 1, "model": {"kind": "mlp", "hidden": [32]}}
    return tiny_config(**tree, downlink={"kind": "ef_sign"}, **overrides)


def test_a_run_charges_compressed_downloads_and_resumes_bit_identically(tmp_path: Path) -> None:
    dense = Engine(parse_config(tiny_config(**{**_tree(), "downlink": {}})), tmp_path / "d", tmp_path / "d" / "db")
    dense.run()
    whole = Engine(parse_config(_tree(checkpoint={"every": 2})), tmp_path / "w", tmp_path / "w" / "db")
    whole.run()
    numel = whole.executor.replica.numel
    message = sign_bytes(Blocks(whole.executor.replica.shapes))
    # every client trains every round: round 0 downloads the model dense, rounds 1-3 one message each
    assert dense.ledger.total_down - whole.ledger.total_down == 3 * 10 * (4 * numel - message)
    assert whole.downlink is not None
    assert not torch.equal(whole.global_state, whole.downlink.model)  # the server's model is not the clients'
    cut = Engine(parse_config(_tree(checkpoint={"every": 2})), tmp_path / "c", tmp_path / "c" / "db")
    cut.run(after_round=lambda row: row.round == 1)
    resumed = Engine(parse_config(_tree(checkpoint={"every": 2})), tmp_path / "c", tmp_path / "c" / "db", resume=True)
    resumed.run()
    assert torch.equal(final_weights(tmp_path / "c"), final_weights(tmp_path / "w"))
    assert resumed.downlink is not None
    assert torch.equal(resumed.downlink.model, whole.downlink.model)
    assert resumed.ledger.total_down == whole.ledger.total_down
