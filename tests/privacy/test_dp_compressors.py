"""DP beside every uplink compressor and beside a norm bound: the client clips what the server will decode, so
each message the server adds has norm at most C whatever the compressor did, and error feedback keeps what the
clip cut off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from fedsim.config import parse_config
from fedsim.sim.rounds.engine import Engine
from tests.conftest import summed_row_norms, tiny_config

CLIP = 0.05  # small beside the MLP's updates, so every client is clipped and the compressors' messages are too
PRIVACY = {"kind": "central", "clip": CLIP, "noise_multiplier": 0.5, "delta": 1e-5}
MLP = {"kind": "mlp", "hidden": [32]}
COMPRESSORS = {
    "topk": {"kind": "topk", "fraction": 0.1},
    "ef_sign": {"kind": "ef_sign"},
    "onebit": {"kind": "onebit", "warmup": 1},
    "qsgd": {"kind": "qsgd", "levels": 2},
    "powersgd": {"kind": "powersgd", "rank": 1},
}


def _added_norms(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **overrides: Any) -> tuple[list[float], Engine]:
    """Run a private engine and record the norm of every client row the sum receives."""
    norms = summed_row_norms(monkeypatch)
    tree = tiny_config(rounds=3, model=MLP, privacy=PRIVACY, **overrides)
    engine = Engine(parse_config(tree), out_dir=tmp_path / "out", db_path=tmp_path / "runs.db")
    engine.run()
    return norms, engine


@pytest.mark.parametrize("kind", sorted(COMPRESSORS))
def test_each_decoded_message_the_server_adds_is_within_the_clip(
    kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    norms, engine = _added_norms(monkeypatch, tmp_path, uplink=COMPRESSORS[kind])
    assert len(norms) == 15  # 5 clients in each of 3 rounds
    assert max(norms) <= CLIP * (1 + 1e-5), (kind, max(norms))
    assert engine.ledger.total_up < 15 * engine.global_state.numel() * 4 * 0.9  # still compressed on the wire


def test_without_the_decoded_clip_qsgds_messages_would_pass_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The clip after decoding does work: QSGD's unbiased rounding of a clipped update leaves the clip."""
    from fedsim.privacy.dp import DifferentialPrivacy

    monkeypatch.setattr(DifferentialPrivacy, "clip_decoded_", lambda self, rows, uplinks: None)
    norms, _ = _added_norms(monkeypatch, tmp_path, uplink=COMPRESSORS["qsgd"])
    assert max(norms) > CLIP * 1.05


def test_error_feedback_keeps_what_the_decoded_clip_cut_off(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With ef_sign, one client's sent message plus its new residual is its clipped update plus its old residual:
    nothing the clip cut off is lost."""
    from fedsim.privacy.dp import DifferentialPrivacy

    seen: list[tuple[torch.Tensor, ...]] = []
    clip_decoded = DifferentialPrivacy.clip_decoded_

    def watching(self: DifferentialPrivacy, rows: Any, uplinks: list[dict[str, torch.Tensor]]) -> None:
        decoded = rows["delta"][0].clone()
        clip_decoded(self, rows, uplinks)
        seen.append((decoded, rows["delta"][0].clone(), uplinks[0]["residual"].clone(), owed["now"]))

    monkeypatch.setattr(DifferentialPrivacy, "clip_decoded_", watching)
    owed: dict[str, torch.Tensor] = {}
    from fedsim.comm.uplink.ef_sign import EFSign

    compress = EFSign.compress_

    def remembering(self: EFSign, rows: torch.Tensor, states: Any, seeds: Any, round_idx: int) -> list[int]:
        owed["now"] = rows[0] + states[0].get("residual", torch.zeros_like(rows[0]))
        return compress(self, rows, states, seeds, round_idx)

    monkeypatch.setattr(EFSign, "compress_", remembering)
    _added_norms(monkeypatch, tmp_path, uplink=COMPRESSORS["ef_sign"])
    decoded, sent, residual, due = max(seen, key=lambda one: float(one[0].norm()))
    assert float(decoded.norm()) > CLIP * 1.001  # the clip cut something off this message
    torch.testing.assert_close(sent + residual, due, rtol=0, atol=1e-6)


def test_a_norm_bound_beside_dp_is_the_clip_at_the_smaller_of_the_two(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    norms, engine = _added_norms(monkeypatch, tmp_path, aggregator={"kind": "norm_bound", "bound": CLIP / 2})
    assert max(norms) <= CLIP / 2 * (1 + 1e-5) and min(norms) > CLIP / 2 * 0.99
    assert engine.robust is not None and engine.privacy is not None
