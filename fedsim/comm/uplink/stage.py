"""The uplink as a stage of the client pipeline: the run's compressor over the clients' ``delta`` rows.

An :class:`Uplink` is the ``compress`` callable both executors call (:func:`fedsim.sim.rounds.upload.upload`), with
K = 1 on the sequential executor and K = the group on the fused one. Each client's random draws come from a
stream keyed by (seed, round, client), so 1 and N ranks compress alike. SkewScout sets the compressor's knob
each round and, on a probe round, reads the residuals of the clients it watches (their unsent update).
"""

from __future__ import annotations

from torch import Tensor

from fedsim.comm.uplink.base import Compressor, UplinkState
from fedsim.streams import stream_seed

_COMPRESS = 0x55  # the compressors' stream, beside the seed, the round and the client


class Uplink:
    def __init__(self, compressor: Compressor, seed: int) -> None:
        self.compressor = compressor
        self.seed = seed
        self.round_idx = 0
        self.watch: set[int] = set()  # clients whose residual the controller wants after the round
        self.residuals: dict[int, Tensor] = {}

    @property
    def stateful(self) -> bool:
        return self.compressor.stateful

    def begin_round(self, round_idx: int, watch: set[int] | None = None) -> None:
        self.round_idx = round_idx
        self.watch = watch or set()
        self.residuals.clear()

    def __call__(self, cids: list[int], rows: dict[str, Tensor], uplinks: list[UplinkState]) -> list[int | None]:
        """Compress the K clients' ``delta`` rows in place; returns each client's wire bytes."""
        delta = rows["delta"]
        seeds = [stream_seed(self.seed, self.round_idx, _COMPRESS, cid) for cid in cids]
        before = {k: delta[k].clone() for k, cid in enumerate(cids) if cid in self.watch}
        sent = self.compressor.compress_(delta, uplinks, seeds, self.round_idx)
        for k, row in before.items():  # error feedback's residual, or (without memory) this round's error
            self.residuals[cids[k]] = uplinks[k]["residual"] if "residual" in uplinks[k] else row - delta[k]
        return list(sent)
