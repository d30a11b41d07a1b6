"""PowerSGD on the uplink against torch's own PowerSGD DDP hook: the same matrix, Q and error give the same
approximation, error and warm-start Q; and which tensors it compresses is the hook's rule."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as hook

from fedsim.comm.uplink import Blocks
from fedsim.comm.uplink.powersgd import PowerSGD, should_compress


class _Bucket:
    """The part of ``dist.GradBucket`` the hook reads (the real one has no Python constructor)."""

    def __init__(self, flat: torch.Tensor, shapes: list[tuple[int, ...]]) -> None:
        self.flat, self.shapes = flat, shapes

    def buffer(self) -> torch.Tensor:
        return self.flat

    def index(self) -> int:
        return 0

    def gradients(self) -> list[torch.Tensor]:
        out, offset = [], 0
        for shape in self.shapes:
            n = torch.Size(shape).numel()
            out.append(self.flat[offset : offset + n].view(shape))
            offset += n
        return out

    def is_last(self) -> bool:
        return True


class _OneRank:
    """A process group of one rank, for the hook: its all-reduces are the identity. A real gloo group of one
    (created and destroyed per test) once aborted the test process with "Resource deadlock avoided" from a gloo
    thread at teardown; this keeps torch's arithmetic and drops the threads."""

    def size(self) -> int:
        return 1


def _identity_all_reduce(tensor: torch.Tensor, group: object = None, async_op: bool = False) -> object:
    done: torch.futures.Future[list[torch.Tensor]] = torch.futures.Future()
    done.set_result([tensor])
    return type("Work", (), {"get_future": lambda self: done, "wait": lambda self: True})()


@pytest.fixture
def one_process_group(monkeypatch: pytest.MonkeyPatch) -> Iterator[_OneRank]:
    monkeypatch.setattr(hook.dist, "all_reduce", _identity_all_reduce)
    yield _OneRank()


@pytest.mark.parametrize("rank", [1, 2, 4])
def test_matches_torchs_hook_on_the_same_matrix_q_and_error(one_process_group: _OneRank, rank: int) -> None:
    shape = (12, 2, 3, 3)  # a conv weight: viewed as 12 x 18
    g = torch.Generator().manual_seed(rank)
    update, error = torch.randn(216, generator=g), 0.1 * torch.randn(216, generator=g)
    q = torch.randn(18 * rank, generator=g)

    state = hook.PowerSGDState(
        process_group=one_process_group, matrix_approximation_rank=rank, start_powerSGD_iter=2, min_compression_rate=1,
        use_error_feedback=True, warm_start=True, orthogonalization_epsilon=1e-8,
    )  # fmt: skip
    state.iter = 2  # past the hook's vanilla all-reduce iterations
    state.error_dict[0] = error.clone()
    state.p_memory_dict[0] = torch.empty(12 * rank)
    state.q_memory_dict[0] = q.clone()
    bucket = _Bucket(update.clone(), [shape])  # what the hook reads of a GradBucket, no more
    expected = hook.powerSGD_hook(state, bucket).wait()  # type: ignore[arg-type]

    ours = PowerSGD(Blocks((shape,)), rank, min_compression=1, warm_start=True)
    rows, client = update[None].clone(), {"residual": error.clone(), "q": q.clone()}
    (nbytes,) = ours.compress_(rows, [client], [0], 5)
    torch.testing.assert_close(rows[0], expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(client["residual"], state.error_dict[0], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(client["q"], state.q_memory_dict[0], rtol=1e-4, atol=1e-5)
    assert nbytes == (12 + 18) * rank * 4


def test_compresses_the_tensors_torchs_hook_would() -> None:
    shapes = [(64, 32), (10, 10), (8, 3, 3, 3), (64,), (2, 300)]
    for n, m in ((64, 32), (10, 10), (8, 27), (2, 300)):
        for rank in (1, 4, 8):
            r = min(n, m, rank)
            assert should_compress(n, m, r, 2.0) == hook._should_compress(n, m, r, 2.0)[0]
    ours = PowerSGD(Blocks(tuple(shapes)), rank=4, min_compression=2.0, warm_start=True)
    compressed = {(n, m) for _, n, m, _ in ours.matrices()}
    assert compressed == {(64, 32)}  # 10x10 gains 1.25x and 8x27 1.5x at rank 4; (2, 300) is rank 2 already
    dense = 10 * 10 + 216 + 64 + 2 * 300
    assert ours.message_bytes() == 4 * ((64 + 32) * 4 + dense)


def test_error_feedback_and_warm_start_carry_over_rounds() -> None:
    ours = PowerSGD(Blocks(((20, 30),)), rank=2, min_compression=1, warm_start=True)
    state: dict[str, torch.Tensor] = {}
    g = torch.Generator().manual_seed(0)
    sent, computed = torch.zeros(600), torch.zeros(600)
    for r in range(30):
        update = torch.randn(1, 600, generator=g)
        computed += update[0]
        rows = update.clone()
        ours.compress_(rows, [state], [r], r)
        sent += rows[0]
        assert state["q"].shape == (30 * 2,)
    torch.testing.assert_close(sent + state["residual"], computed, rtol=0, atol=1e-3)  # nothing lost for good


def orthonormal(a: torch.Tensor) -> torch.Tensor:
    """Gram-Schmidt on the columns of ``a`` (float64), the textbook way."""
    cols: list[torch.Tensor] = []
    for j in range(a.shape[1]):
        v = a[:, j].clone()
        for c in cols:
            v -= (c @ v) * c
        cols.append(v / (v.norm() + 1e-8))
    return torch.stack(cols, 1)


@pytest.mark.parametrize(("iterations", "half"), [(2, False), (3, False), (1, True), (2, True)])
def test_more_power_iterations_and_float16_factors_are_the_formula(iterations: int, half: bool) -> None:
    """Subspace iteration ``Q <- orth(Q); P <- orth(M Q); Q <- M^T P``, repeated; with ``half`` the server reads
    ``P`` and ``Q`` rounded to float16, and what that rounding missed stays in the residual."""
    g = torch.Generator().manual_seed(iterations)
    m, q0 = torch.randn(20, 30, generator=g, dtype=torch.float64), torch.randn(30, 2, generator=g, dtype=torch.float64)
    q = q0
    for _ in range(iterations):
        p = orthonormal(m @ orthonormal(q))
        q = m.T @ p
    if half:
        p, q = p.half().double(), q.half().double()
    want = p @ q.T

    ours = PowerSGD(Blocks(((20, 30),)), 2, min_compression=1, warm_start=True, iterations=iterations, half=half)
    rows, client = m.flatten()[None].float().clone(), {"q": q0.flatten().float()}
    (nbytes,) = ours.compress_(rows, [client], [0], 0)
    torch.testing.assert_close(rows[0].double(), want.flatten(), rtol=0, atol=2e-3 if half else 2e-5)
    torch.testing.assert_close(client["residual"].double(), (m - want).flatten(), rtol=0, atol=2e-3 if half else 2e-5)
    assert nbytes == (20 + 30) * 2 * (2 if half else 4)
    sent_q = client["q"]  # the warm start for the next turn: the Q the server read
    assert torch.equal(sent_q, sent_q.half().float()) == half  # float16 values exactly, when sent as float16
    torch.testing.assert_close(sent_q.double(), q.flatten(), rtol=0, atol=4e-3 if half else 2e-5)
    if iterations > 1:  # the extra iterations approximate the top-2 subspace better than one does
        one = PowerSGD(Blocks(((20, 30),)), 2, min_compression=1, warm_start=True)
        single = m.flatten()[None].float().clone()
        one.compress_(single, [{"q": q0.flatten().float()}], [0], 0)
        assert (m.flatten() - rows[0].double()).norm() < (m.flatten() - single[0].double()).norm()
