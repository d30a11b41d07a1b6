"""ACP-SGD against the paper's alternation written here in numpy on fixed inputs: P-turns send ``P = M orth(Q)``
and decode ``P orth(Q)^T``, Q-turns send ``Q = M^T orth(P)`` and decode ``orth(P) Q^T``, with error feedback;
a message is half of PowerSGD's factors."""

from __future__ import annotations

import numpy as np
import torch

from fedsim.comm.uplink.acpsgd import ACPSGD
from fedsim.comm.uplink.base import Blocks, client_generator
from fedsim.comm.uplink.powersgd import PowerSGD

N, M, R = 6, 8, 2
BLOCKS = Blocks(((N, M), (N,)))  # a 6x8 weight (compressed at rank 2) and a bias (dense)
SEED = 7


def _orth(x: np.ndarray) -> np.ndarray:
    return np.linalg.qr(x)[0]  # a column's sign may differ from Gram-Schmidt's: P Q^T does not see it


def test_acpsgd_alternates_its_factors_as_the_paper_does() -> None:
    rng = np.random.default_rng(0)
    updates = [rng.normal(size=N * M + N) for _ in range(5)]
    compressor, state = ACPSGD(BLOCKS, R, min_compression=1.0), dict[str, torch.Tensor]()
    q = torch.empty(M * R).normal_(generator=client_generator(SEED, torch.device("cpu"))).double().numpy()
    q_last, p_last = q.reshape(M, R), None
    e = np.zeros(N * M + N)
    for turn, g in enumerate(updates):
        row = torch.from_numpy(g).float()[None].clone()
        (sent,) = compressor.compress_(row, [state], [SEED], turn)
        owed = g + e
        matrix = owed[: N * M].reshape(N, M)
        if turn % 2 == 0:  # a P-turn: P from the last Q
            other = _orth(q_last)
            p_last = matrix @ other
            decoded = p_last @ other.T
            assert sent == (N * R + N) * 4
        else:  # a Q-turn: Q from the last P
            assert p_last is not None
            other = _orth(p_last)
            q_last = matrix.T @ other
            decoded = other @ q_last.T
            assert sent == (M * R + N) * 4
        expected = np.concatenate([decoded.reshape(-1), owed[N * M :]])
        np.testing.assert_allclose(row[0].double().numpy(), expected, rtol=2e-4, atol=2e-5)
        e = owed - expected
        np.testing.assert_allclose(state["residual"].double().numpy(), e, rtol=2e-4, atol=2e-5)


def test_two_acpsgd_turns_cost_one_powersgd_turns_factors() -> None:
    acp = ACPSGD(BLOCKS, R, 1.0)
    power = PowerSGD(BLOCKS, R, 1.0, warm_start=True)
    compressed = acp.matrices()
    both = acp.turn_bytes(compressed, True) + acp.turn_bytes(compressed, False)
    assert both == power.message_bytes() + N * 4  # P's and Q's once each, the bias twice
