"""Export the frozen bottom to ONNX: on a machine with fedsim's cloud extras (torch, transformers, onnx).

The export has dynamic batch and sequence axes, is checked with ``onnx.checker`` and compared with torch on a
padded batch longer than the one traced before it is saved (atomically).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from torch import nn

from edge.onnx_bottom import HIDDEN_KEY, INPUTS


class ExportError(RuntimeError):
    """The exported bottom does not match torch or does not pass the ONNX checker."""


def export_bottom(bottom: nn.Module, path: Path, opset: int = 17, atol: float = 1e-4) -> float:
    """Export ``bottom`` to ``path`` (written atomically); returns the max abs difference to torch."""
    ids = torch.tensor([[101, 7592, 2088, 2003, 1037, 3231, 102], [101, 2748, 102, 0, 0, 0, 0]])
    mask = (ids != 0).long()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    bottom.eval()
    torch.onnx.export(
        bottom,
        (ids, mask),
        str(tmp),
        input_names=list(INPUTS),
        output_names=["hidden"],
        dynamic_axes={
            "input_ids": {0: "batch", 1: "tokens"},
            "attention_mask": {0: "batch", 1: "tokens"},
            "hidden": {0: "batch", 1: "tokens"},
        },
        opset_version=opset,
        dynamo=False,
        external_data=False,
    )
    graph = onnx.load(str(tmp))
    hidden = int(bottom.embeddings.word_embeddings.embedding_dim)  # type: ignore[union-attr,arg-type]
    graph.metadata_props.add(key=HIDDEN_KEY, value=str(hidden))  # the edge's baseline width, whatever it sends
    onnx.save(graph, str(tmp))
    onnx.checker.check_model(onnx.load(str(tmp)), full_check=True)
    session = ort.InferenceSession(str(tmp), providers=["CPUExecutionProvider"])
    # a longer batch than the one traced: the axes really are dynamic
    probe = torch.randint(1000, 5000, (3, 11))
    probe_mask = torch.ones_like(probe)
    probe_mask[1, 6:] = 0
    with torch.no_grad():
        want = bottom(probe, probe_mask).numpy()
    got = session.run(None, {"input_ids": probe.numpy(), "attention_mask": probe_mask.numpy()})[0]
    diff = float(np.abs(got - want)[probe_mask.numpy().astype(bool)].max())
    if not diff <= atol:
        tmp.unlink(missing_ok=True)
        raise ExportError(f"exported bottom differs from torch by {diff:.2e} (> {atol:.0e})")
    tmp.replace(path)
    return diff
