"""PowerSGD on the uplink against torch's own PowerSGD DDP hook: the same matrix, Q and error give the same
approximation, error and warm-start Q; and which tensors it compresses is the hook's rule."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
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


@pytest.fixture
def one_process_group(tmp_path: Path) -> Iterator[None]:
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("rank", [1, 2, 4])
def test_matches_torchs_hook_on_the_same_matrix_q_and_error(one_process_group: None, rank: int) -> None:
    shape = (12, 2, 3, 3)  # a conv weight: viewed as 12 x 18
    g = torch.Generator().manual_seed(rank)
    update, error = torch.randn(216, generator=g), 0.1 * torch.randn(216, generator=g)
    q = torch.randn(18 * rank, generator=g)

    state = hook.PowerSGDState(
        process_group=None, matrix_approximation_rank=rank, start_powerSGD_iter=2, min_compression_rate=1,
        use_error_feedback=True, warm_start=True, orthogonalization_epsilon=1e-8,
    )  # fmt: skip
    state.iter = 2  # past the hook's vanilla all-reduce iterations
    state.error_dict[0] = error.clone()
    state.p_memory_dict[0] = torch.empty(12 * rank)
    state.q_memory_dict[0] = q.clone()
    expected = hook.powerSGD_hook(state, _Bucket(update.clone(), [shape])).wait()

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
