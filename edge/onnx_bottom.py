"""The frozen bottom on the edge: export to ONNX once, then run it in ONNX Runtime.

The export has dynamic batch and sequence axes (inputs ``input_ids`` and ``attention_mask``, int64; output
``hidden``, float32), is checked with ``onnx.checker`` and compared with torch on a padded batch before it is
saved. :class:`EdgeEncoder` tokenises on the device, runs the session and strips the padding, so what leaves
the device is one ``(tokens, hidden)`` matrix plus each sentence's length.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import torch
from transformers import AutoTokenizer

from fedsim.split.model import Bottom
from fedsim.split.wire import TokenBatch

INPUTS = ("input_ids", "attention_mask")


class ExportError(RuntimeError):
    """The exported bottom does not match torch or does not pass the ONNX checker."""


def export_bottom(bottom: Bottom, path: Path, opset: int = 17, atol: float = 1e-4) -> float:
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


class EdgeEncoder:
    """Tokeniser + ONNX Runtime session of the bottom; ``encode(texts)`` gives a :class:`TokenBatch`."""

    def __init__(self, onnx_path: Path, tokenizer_path: Path, max_length: int = 128, threads: int = 1) -> None:
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True)
        self.max_length = max_length

    def encode(self, texts: list[str]) -> TokenBatch:
        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="np")
        ids, mask = enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64)
        (hidden,) = self.session.run(None, {"input_ids": ids, "attention_mask": mask})
        keep = mask.astype(bool)
        return TokenBatch(tokens=np.ascontiguousarray(hidden[keep], dtype=np.float32), lengths=keep.sum(1))
