"""Uplink compressors (``uplink:``): one file per compressor behind :class:`~fedsim.comm.uplink.base.Compressor`.

``build_uplink`` makes the run's :class:`~fedsim.comm.uplink.stage.Uplink` stage from its config, or None for
a dense uplink. The names are registered here once, like the activation codecs; the config, the command line's
refusals and the docs read the same list.
"""

from __future__ import annotations

from collections.abc import Callable

from fedsim.comm.uplink.base import Blocks, Compressor
from fedsim.comm.uplink.ef_sign import EFSign
from fedsim.comm.uplink.onebit import OneBit
from fedsim.comm.uplink.powersgd import PowerSGD
from fedsim.comm.uplink.qsgd import QSGD
from fedsim.comm.uplink.stage import Uplink
from fedsim.comm.uplink.topk import TopK
from fedsim.config import CompressorConfig, KnobConfig

__all__ = ["COMPRESSORS", "Blocks", "Compressor", "Uplink", "build_compressor", "build_uplink"]

COMPRESSORS: dict[str, Callable[[CompressorConfig, Blocks], Compressor]] = {
    "topk": lambda cfg, blocks: TopK(cfg.fraction),
    "ef_sign": lambda cfg, blocks: EFSign(blocks),
    "onebit": lambda cfg, blocks: OneBit(blocks, cfg.beta, cfg.warmup),
    "qsgd": lambda cfg, blocks: QSGD(cfg.levels, cfg.bucket, cfg.elias),
    "powersgd": lambda cfg, blocks: PowerSGD(
        blocks, cfg.rank, cfg.min_compression, cfg.warm_start, cfg.iterations, cfg.half
    ),
}


def build_compressor(cfg: CompressorConfig, blocks: Blocks) -> Compressor:
    return COMPRESSORS[cfg.kind](cfg, blocks)


def build_uplink(cfg: CompressorConfig, knob: KnobConfig | None, blocks: Blocks, seed: int) -> Uplink | None:
    """The run's uplink stage; a ``topk`` knob without ``uplink.kind`` means top-k (SkewScout's first knob)."""
    if not cfg.enabled and knob is not None and knob.name == "topk":
        cfg = cfg.model_copy(update={"kind": "topk"})
    return Uplink(build_compressor(cfg, blocks), seed) if cfg.enabled else None
