"""The device pool: ranks of torch.distributed, one replica each.

``fedsim run --devices N`` starts N local ranks with :func:`launch`; under ``torchrun`` the ranks already exist
and :func:`init_from_env` joins them. Rank 0 owns the run store and the checkpoints. There is no home-made
RPC: a round costs one all-reduce of the flat sum buffer plus one small gather of client timings.

The process group is ``cpu:gloo,cuda:nccl`` where CUDA is built in, so the sum of CUDA tensors goes over
NCCL and of CPU tensors over gloo; the control traffic (pickled objects: records, run ids, state hand-offs)
always goes over a gloo group of its own, which never needs a GPU. NCCL forbids two ranks on one GPU: to
emulate more devices than GPUs, give one rank several logical devices (``--ranks``).
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fedsim.cores import env_count
from fedsim.data.base import ClientData

# NCCL sums CUDA tensors where it is built in; gloo sums CPU tensors (a CPU accelerator) and carries control
BACKEND = "cpu:gloo,cuda:nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"


@dataclass(frozen=True)
class Pool:
    """This process's place in the pool; a pool of one needs no torch.distributed at all."""

    rank: int = 0
    world: int = 1
    control: Any = None  # the gloo group of the object collectives; None: the default group

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def shard(self, data: ClientData) -> ClientData:
        """This rank's part of ``data`` (the test set, which the ranks score in parts): every ``world``-th sample
        from the ``rank``-th."""
        return ClientData(data.x[self.rank :: self.world], data.y[self.rank :: self.world])

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
        dist.all_gather_object(out, obj, group=self.control)
        return out, len(pickle.dumps(obj)) * (self.world - 1) * self.world

    def any_rank(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any rank (every rank calls this; control traffic, not counted as moved)."""
        if self.world == 1:
            return flag
        count = torch.tensor([int(flag)])  # on the CPU: the control group is gloo's
        dist.all_reduce(count, group=self.control)
        return bool(count.item())

    def broadcast(self, obj: Any) -> Any:
        if self.world == 1:
            return obj
        box = [obj if self.is_root else None]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]


_CONTROL: list[Any] = []  # the control group, created once per process group


def current_pool() -> Pool:
    if dist.is_available() and dist.is_initialized():
        if not _CONTROL:
            _CONTROL.append(dist.new_group(backend="gloo") if BACKEND != "gloo" else None)
        return Pool(dist.get_rank(), dist.get_world_size(), _CONTROL[0])
    return Pool()


def init_from_env() -> Pool:
    """Join the process group that ``torchrun`` (or :func:`launch`) described in the environment. A process
    that joins here leaves at exit if nothing left before (a ``Simulation`` script under torchrun): a group
    still joined when the interpreter ends tears its threads down mid-flight ("terminate called without an
    active exception", now and then, on the rank that exits second)."""
    if env_count("WORLD_SIZE", 1, least=1) > 1 and not dist.is_initialized():
        dist.init_process_group(BACKEND)
        atexit.register(leave, False)  # a no-op where the group was left already
    return current_pool()


def leave(together: bool) -> None:
    """Leave the process group this process joined (if any); ``together``: after a barrier, so no rank exits
    while another still talks to it (only where every rank is known to be leaving at this point)."""
    if dist.is_available() and dist.is_initialized():
        if together:
            dist.barrier(group=_CONTROL[0] if _CONTROL else None)
        _CONTROL.clear()
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _entry(rank: int, world: int, port: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    if hasattr(os, "setpgrp"):  # a group of its own: a signal reaches it once, forwarded by the parent
        os.setpgrp()
    os.environ.update(
        {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank), "WORLD_SIZE": str(world)}
    )
    os.environ.setdefault("LOCAL_RANK", str(rank))
    init_from_env()
    try:
        fn(*args)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # the run is over: a late signal must not kill the teardown
            signal.signal(sig, signal.SIG_IGN)
        _CONTROL.clear()
        dist.destroy_process_group()


class RankLost(RuntimeError):
    """A rank of a local pool ended without finishing (killed, or crashed in native code); the others were
    stopped. ``rank``, the ``pid`` of rank 0, and how it ended (``how``: a signal's name or an exit code)."""

    def __init__(self, rank: int, ranks: int, how: str, root_pid: int) -> None:
        super().__init__(f"rank {rank} of {ranks} was lost ({how})")
        self.rank, self.ranks, self.how, self.root_pid = rank, ranks, how, root_pid


def launch(ranks: int, fn: Callable[..., Any], *args: Any) -> None:
    """Run ``fn(*args)`` on ``ranks`` local processes joined by gloo, each in a process group of its own; every
    signal this process gets is forwarded to them (:func:`~fedsim.sim.persist.interrupted.forwarding`), and it
    waits for them whatever signal comes. A rank that dies is :class:`RankLost`; one that raises, its error."""
    from fedsim.sim.persist.interrupted import forwarding

    context = mp.start_processes(
        _entry, args=(ranks, _free_port(), fn, args), nprocs=ranks, join=False, start_method="spawn"
    )
    processes = context.processes

    def forward(signum: int) -> None:
        for process in processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signum)

    quiet = logging.getLogger("torch.multiprocessing.spawn")  # its "Terminating process" lines: ours says it
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with forwarding(forward):
            while True:
                try:
                    if context.join():
                        return
                except KeyboardInterrupt:  # a second signal: the ranks have it too and stop at once; wait for them
                    continue
                except mp.ProcessExitedException as exc:
                    how = exc.signal_name or f"exit code {exc.exit_code}"
                    raise RankLost(exc.error_index, ranks, how, processes[0].pid or 0) from None
    finally:
        quiet.setLevel(level)


def join_torchrun() -> Pool:
    """This process's pool: torchrun's group, joined the first time, where torchrun started the process;
    otherwise the group already joined, or a pool of one."""
    return init_from_env() if in_torchrun() else current_pool()


def in_torchrun() -> bool:
    return "TORCHELASTIC_RUN_ID" in os.environ or ("WORLD_SIZE" in os.environ and "RANK" in os.environ)
