"""The broadcast model compressed (``downlink:``), with the server's own error feedback.

The server keeps its model ``x`` and the model every client holds, ``x_hat``. After each server update it sends
the model's change ``x_{t+1} - x_t`` through the same compressors as the uplink, with the server as the one
"client" whose memory (residual, momentum, ``Q``) it keeps; every client adds what it decodes to ``x_hat``.
Clients train from ``x_hat``, and ``x - x_hat`` is what the error feedback still owes them. A client of the
round that also trained the round before holds the last ``x_hat`` and downloads one compressed message; any
other client downloads ``x_hat`` dense (the ledger charges both as such). Evaluation reads the server's ``x``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor

from fedsim.comm.uplink import Blocks, build_compressor
from fedsim.comm.uplink.base import Compressor, UplinkState
from fedsim.config import CompressorConfig
from fedsim.streams import stream_seed

_BROADCAST = 0x44  # the downlink compressor's stream, beside the seed and the round


class Downlink:
    def __init__(self, compressor: Compressor, seed: int, global_state: Tensor) -> None:
        self.compressor = compressor
        self.seed = seed
        self.model = global_state.clone()  # x_hat: what the clients hold
        self.last = global_state.clone()  # x at the last broadcast
        self.state: UplinkState = {}  # the server's compressor memory
        self.message_bytes = 0  # the latest broadcast's compressed size; none yet
        self.previous: set[int] = set()  # the clients that trained the round before: they hold the last x_hat
        self.current: set[int] = set()

    def begin_round(self, cohort: list[int]) -> None:
        self.current = set(cohort)

    def model_bytes(self, cid: int, dense: int) -> int:
        """What client ``cid`` downloads this round: one message if it holds the last model, else the model."""
        return self.message_bytes if cid in self.previous and self.message_bytes else dense

    def broadcast_(self, global_state: Tensor, round_idx: int) -> None:
        """After the server update of round ``round_idx``: compress the model's change into ``x_hat``."""
        change = (global_state - self.last)[None]
        seed = stream_seed(self.seed, round_idx, _BROADCAST)
        (self.message_bytes,) = self.compressor.compress_(change, [self.state], [seed], round_idx)
        self.model += change[0]
        self.last.copy_(global_state)
        self.previous = self.current

    def tensors(self) -> dict[str, Tensor]:
        """What a checkpoint keeps, on the host."""
        out = {"downlink.model": self.model.to("cpu", copy=True), "downlink.last": self.last.to("cpu", copy=True)}
        return out | {f"downlink.state.{k}": v.to("cpu", copy=True) for k, v in self.state.items()}

    def state_dict(self) -> dict[str, object]:
        return {"message_bytes": self.message_bytes, "previous": sorted(self.previous)}

    def load_state_dict(self, meta: Mapping[str, Any], tensors: Mapping[str, Tensor]) -> None:
        device = self.model.device
        self.model.copy_(tensors["downlink.model"])
        self.last.copy_(tensors["downlink.last"])
        prefix = "downlink.state."
        self.state = {k[len(prefix) :]: v.to(device) for k, v in tensors.items() if k.startswith(prefix)}
        self.message_bytes = int(meta["message_bytes"])
        self.previous = {int(c) for c in meta["previous"]}


def build_downlink(cfg: CompressorConfig, blocks: Blocks, seed: int, global_state: Tensor) -> Downlink | None:
    """The run's compressed broadcast, or None: the model goes dense."""
    return Downlink(build_compressor(cfg, blocks), seed, global_state) if cfg.enabled else None
