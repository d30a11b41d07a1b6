"""What a message costs on the wire: each client's update on the way up (``uplink:``) and the broadcast model
on the way down (``downlink:``), dense or through a registered compressor.

A compressor's settings class subclasses :class:`CompressorConfig` with ``kind: Literal["..."]`` and declares
``stateful`` (it keeps memory per client between rounds: error feedback, momentum, warm-start factors, which
live in the state store like any client state). A method with a server half of its own, as 1-bit LAMB has,
puts it in a server optimiser (``server_optimizer.kind: onebit_lamb``). The built-in compressors, after
the seed papers, are in :mod:`fedsim.comm.uplink`, one file each; :data:`COMPRESSORS` resolves ``uplink.kind``
and ``downlink.kind`` alike (the downlink is the server compressing the model's change with its own memory).
"""

from __future__ import annotations

from typing import ClassVar, Literal

from fedsim.config.registry import Registry, StageConfig


class CompressorConfig(StageConfig):
    """The compressor every client runs on its model update (the ``delta`` it uploads) before it is sent, or,
    as ``downlink:``, the server on the change of the model it broadcasts."""

    stateful: ClassVar[bool] = False  # keeps memory per client between rounds
    knob: ClassVar[str | None] = None  # the SkewScout knob it exposes (control.knob.name), if any
    sends_momenta: ClassVar[bool] = False  # sends its 1-bit momenta after a warm-up (1-bit LAMB's server reads them)

    @property
    def enabled(self) -> bool:
        return self.kind != "none"


class NoCompression(CompressorConfig):
    """``none``: the message goes dense (float32)."""

    kind: Literal["none"] = "none"


COMPRESSORS = Registry[CompressorConfig](
    "uplink", CompressorConfig, builtin="fedsim.comm.uplink", default="none", decorator="register_compressor"
)
register_compressor = COMPRESSORS.register
