"""The device pool: ranks of torch.distributed over gloo (every device is a CPU process for now), one replica each.

``fedsim run --devices N`` starts N local ranks with :func:`launch`; under ``torchrun`` the ranks already exist
and :func:`init_from_env` joins them. Rank 0 owns the run store and the checkpoints. There is no home-made
RPC: a round costs one all-reduce of the flat sum buffer plus one small gather of client timings.
"""

from __future__ import annotations

import os
import pickle
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


@dataclass(frozen=True)
class Pool:
    """This process's place in the pool; a pool of one needs no torch.distributed at all."""

    rank: int = 0
    world: int = 1

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def all_reduce_(self, tensor: torch.Tensor) -> int:
        """Sum ``tensor`` across ranks in place; returns the bytes a ring all-reduce moves in total."""
        if self.world == 1:
            return 0
        dist.all_reduce(tensor)
        return 2 * (self.world - 1) * tensor.numel() * tensor.element_size()

    def all_gather(self, obj: Any) -> tuple[list[Any], int]:
        """Every rank's ``obj`` (pickled), and the bytes that moved."""
        if self.world == 1:
            return [obj], 0
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out, len(pickle.dumps(obj)) * (self.world - 1) * self.world

    def broadcast(self, obj: Any) -> Any:
        if self.world == 1:
            return obj
        box = [obj if self.is_root else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def current_pool() -> Pool:
    if dist.is_available() and dist.is_initialized():
        return Pool(dist.get_rank(), dist.get_world_size())
    return Pool()


def init_from_env() -> Pool:
    """Join the process group that ``torchrun`` (or :func:`launch`) described in the environment."""
    if "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1 and not dist.is_initialized():
        # the engine keeps models, sums and data on the CPU, which NCCL cannot reduce: gloo until devices are GPUs
        dist.init_process_group("gloo")
    return current_pool()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _entry(rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    os.environ.update(
        {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(world)}
    )
    os.environ.setdefault("LOCAL_RANK", str(rank))
    init_from_env()
    try:
        fn(*args)
    finally:
        dist.destroy_process_group()


def launch(ranks: int, fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` on ``ranks`` local processes joined by gloo; raises if any rank fails."""
    mp.start_processes(_entry, args=(ranks, _free_port(), fn, args), nprocs=ranks, join=True, start_method="spawn")


def in_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("WORLD_SIZE" in os.environ and "RANK" in os.environ)
