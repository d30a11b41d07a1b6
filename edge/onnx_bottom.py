"""The frozen bottom on the edge: ONNX Runtime and the model's own tokenizer, no torch.

The bottom is exported once on a machine with fedsim's cloud extras (:mod:`edge.export`, ``fedsim edge
export``). The exported graph has dynamic batch and sequence axes (inputs ``input_ids`` and ``attention_mask``,
int64; output ``hidden``, float32). :class:`EdgeEncoder` tokenises on the device with the ``tokenizers``
library (the same ``tokenizer.json`` transformers' fast tokenizer reads, so the ids are the same), runs the
session and strips the padding, so what leaves the device is one ``(tokens, hidden)`` matrix plus each
sentence's length.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

from fedsim.config import ConfigError
from fedsim.wire.batch import TokenBatch

INPUTS = ("input_ids", "attention_mask")
HIDDEN_KEY = "fedsim.hidden_size"  # metadata of an exported bottom: the model's hidden size


def tokenizer_beside(onnx_path: Path) -> Path:
    """Where ``fedsim edge export`` puts the model's tokenizer: ``bottom.tokenizer.json`` next to ``bottom.onnx``."""
    return onnx_path.with_name(f"{onnx_path.stem}.tokenizer.json")


def load_tokenizer(source: Path, max_length: int) -> Tokenizer:
    """A ``tokenizer.json`` (or a model directory holding one) truncating to ``max_length`` tokens and padding
    to the batch's longest sentence."""
    path = Path(source) / "tokenizer.json" if Path(source).is_dir() else Path(source)
    if not path.is_file():
        raise ConfigError(f"tokenizer {source}: no tokenizer.json there (expected a Hugging Face model directory)")
    tokenizer = Tokenizer.from_file(str(path))
    saved = tokenizer.padding or {}
    tokenizer.enable_truncation(max_length=max_length)
    tokenizer.enable_padding(pad_id=int(saved.get("pad_id", 0)), pad_token=str(saved.get("pad_token", "[PAD]")))
    return tokenizer


class EdgeEncoder:
    """Tokeniser + ONNX Runtime session of the bottom; ``encode(texts)`` gives a :class:`TokenBatch`."""

    def __init__(self, onnx_path: Path, tokenizer_path: Path, max_length: int = 128, threads: int = 1) -> None:
        """``tokenizer_path``: a ``tokenizer.json`` or a model directory holding one."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        self.session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        self.tokenizer = load_tokenizer(tokenizer_path, max_length)
        self.max_length = max_length
        meta = self.session.get_modelmeta().custom_metadata_map
        self.hidden = int(meta[HIDDEN_KEY]) if HIDDEN_KEY in meta else None  # the model's width, for the baseline

    def encode(self, texts: list[str]) -> TokenBatch:
        encodings = self.tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        (hidden,) = self.session.run(None, {"input_ids": ids, "attention_mask": mask})
        keep = mask.astype(bool)
        tokens = np.ascontiguousarray(hidden[keep], dtype=np.float32)
        return TokenBatch(tokens=tokens, lengths=keep.sum(1), hidden=self.hidden)
