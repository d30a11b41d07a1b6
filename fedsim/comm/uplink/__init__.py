"""Uplink compressors (``uplink:``): one file per compressor behind :class:`~fedsim.comm.uplink.base.Compressor`,
each registering its settings class and builder (:data:`fedsim.config.compressor.COMPRESSORS`) when this package
is imported.

``build_uplink`` makes the run's :class:`~fedsim.comm.uplink.stage.Uplink` stage from its config, or None for
a dense uplink.
"""

from __future__ import annotations

from fedsim.comm.uplink import acpsgd, ef_sign, onebit, powersgd, qsgd, topk
from fedsim.comm.uplink.base import Blocks, Compressor
from fedsim.comm.uplink.stage import Uplink
from fedsim.config import KnobConfig
from fedsim.config.compressor import COMPRESSORS, CompressorConfig, NoCompression, register_compressor

__all__ = ["BUILT_IN", "Blocks", "Compressor", "Uplink", "build_compressor", "build_uplink"]

BUILT_IN = (acpsgd, ef_sign, onebit, powersgd, qsgd, topk)  # each registers its own compressor


@register_compressor(NoCompression)
def dense(cfg: NoCompression, blocks: Blocks) -> None:
    return None  # no stage: the message goes dense


def build_compressor(cfg: CompressorConfig, blocks: Blocks) -> Compressor:
    compressor: Compressor = COMPRESSORS.build(cfg, blocks)
    return compressor


def build_uplink(cfg: CompressorConfig, knob: KnobConfig | None, blocks: Blocks, seed: int) -> Uplink | None:
    """The run's uplink stage; a ``topk`` knob without ``uplink.kind`` means top-k (SkewScout's first knob)."""
    if not cfg.enabled and knob is not None and knob.name == "topk":
        cfg = COMPRESSORS.parse({"kind": "topk"})
    return Uplink(build_compressor(cfg, blocks), seed) if cfg.enabled else None
