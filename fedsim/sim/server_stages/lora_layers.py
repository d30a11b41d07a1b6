"""Where a peft LoRA adapter's factors sit in the flat model, read from the trained parameters' names.

A stage that works on LoRA's product ``B A`` layer by layer (:mod:`.lora_factor_error`, :mod:`.flexlora`) finds
each layer's factors here: peft names them ``<layer>.lora_B.<adapter>.weight`` and ``<layer>.lora_A.<adapter>.
weight``, in the order of :attr:`StageContext.parameters`, which is the flat vector's.
"""

from __future__ import annotations

import torch

Layer = tuple[slice, tuple[int, ...], slice | None, tuple[int, ...]]  # B's place and shape, A's (None: frozen)


def lora_layers(parameters: tuple[tuple[str, tuple[int, ...]], ...]) -> dict[str, Layer]:
    """Each LoRA layer's factors in the flat vector, by the layer's name: B's slice and shape, A's (None where A
    is not trained). Only the factors' weights count (a ``lora_B`` bias, peft's ``lora_bias``, is not a
    factor)."""
    places: dict[str, tuple[slice, tuple[int, ...]]] = {}
    offset = 0
    for name, shape in parameters:
        n = int(torch.Size(shape).numel())
        places[name] = (slice(offset, offset + n), shape)
        offset += n
    layers: dict[str, Layer] = {}
    for name, (b, b_shape) in places.items():
        if ".lora_B." in name and name.endswith(".weight"):
            layer = name.split(".lora_B.")[0]
            a = places.get(name.replace(".lora_B.", ".lora_A."))
            layers[layer] = (b, b_shape, None, ()) if a is None else (b, b_shape, a[0], a[1])
    return layers
