"""Top-k with error feedback: bytes on the wire, the largest entries, and nothing lost over rounds."""

from __future__ import annotations

import pytest
import torch

from fedsim.comm.topk import TopK


def test_sends_the_largest_entries_and_counts_their_bytes() -> None:
    update = torch.tensor([0.1, -5.0, 0.2, 3.0, -0.3, 0.0, 1.0, 0.05])
    sparse, residual = TopK(0.25).compress(update)
    assert sparse.nbytes == 2 * 8
    assert sorted(sparse.indices.tolist()) == [1, 3]
    assert torch.equal(sparse.dense() + residual, update)
    assert residual[1] == 0 and residual[3] == 0


def test_error_feedback_loses_nothing_over_rounds() -> None:
    torch.manual_seed(0)
    topk = TopK(0.01)
    residual = None
    sent = torch.zeros(10_000)
    computed = torch.zeros(10_000)
    for _ in range(20):
        update = torch.randn(10_000)
        computed += update
        sparse, residual = topk.compress(update, residual)
        sent += sparse.dense()
        assert sparse.nbytes == 100 * 8
    assert residual is not None
    torch.testing.assert_close(sent + residual, computed, rtol=0, atol=1e-4)


def test_fraction_one_is_lossless_and_bad_fractions_are_refused() -> None:
    update = torch.randn(7)
    sparse, residual = TopK(1.0).compress(update)
    assert torch.equal(sparse.dense(), update) and not residual.any()
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="top-k fraction"):
            TopK(bad)
