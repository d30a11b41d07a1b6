"""Top-k with error feedback: bytes on the wire, the largest entries, and nothing lost over rounds."""

from __future__ import annotations

import pytest
import torch

from fedsim.comm.uplink.topk import TopK


def _empty() -> dict[str, torch.Tensor]:
    return {}  # a client's uplink state before its first turn


def test_sends_the_largest_entries_and_counts_their_bytes() -> None:
    update = torch.tensor([[0.1, -5.0, 0.2, 3.0, -0.3, 0.0, 1.0, 0.05]])
    rows, state = update.clone(), _empty()
    (nbytes,) = TopK(0.25).compress_(rows, [state], [0], 0)
    assert nbytes == 2 * 8
    assert rows.nonzero()[:, 1].tolist() == [1, 3]
    assert torch.equal(rows + state["residual"], update)
    assert state["residual"][1] == 0 and state["residual"][3] == 0


def test_error_feedback_loses_nothing_over_rounds() -> None:
    torch.manual_seed(0)
    topk, state = TopK(0.01), _empty()
    sent = torch.zeros(10_000)
    computed = torch.zeros(10_000)
    for r in range(20):
        update = torch.randn(1, 10_000)
        computed += update[0]
        rows = update.clone()
        (nbytes,) = topk.compress_(rows, [state], [0], r)
        sent += rows[0]
        assert nbytes == 100 * 8 and int(rows.count_nonzero()) == 100
    torch.testing.assert_close(sent + state["residual"], computed, rtol=0, atol=1e-4)


def test_fraction_one_is_lossless_and_bad_fractions_are_refused() -> None:
    update = torch.randn(1, 7)
    rows, state = update.clone(), _empty()
    TopK(1.0).compress_(rows, [state], [0], 0)
    assert torch.equal(rows, update) and not state["residual"].any()
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="top-k fraction"):
            TopK(bad)
