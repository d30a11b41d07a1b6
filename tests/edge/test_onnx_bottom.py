"""The bottom exported to ONNX matches torch, runs in ONNX Runtime, and the edge strips padding exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import torch
from transformers import AutoTokenizer

from edge.export import export_bottom
from edge.onnx_bottom import EdgeEncoder
from fedsim.split.decode import pad
from fedsim.split.model import load_encoder, minilm_path, split_encoder

# float32 through 3 transformer layers, ONNX Runtime vs torch kernels
ATOL = 1e-4


def test_export_checks_and_matches_torch_and_the_edge_strips_padding(tmp_path: Path) -> None:
    bottom, _ = split_encoder(load_encoder(), 3, num_labels=2)
    path = tmp_path / "bottom.onnx"
    diff = export_bottom(bottom, path)
    assert diff < ATOL
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    dims = [d.dim_param for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", "tokens"]
    assert not list(tmp_path.glob(".*.tmp"))

    edge = EdgeEncoder(path, minilm_path())
    texts = ["a gripping , funny film", "dull", "the plot is thin but the acting carries it all the way"]
    batch = edge.encode(texts)
    # the edge tokenises with the `tokenizers` library; transformers' tokenizer is the reference
    reference = AutoTokenizer.from_pretrained(minilm_path(), local_files_only=True)
    tok = reference(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    assert batch.lengths.tolist() == tok["attention_mask"].sum(1).tolist()
    assert batch.tokens.shape == (int(tok["attention_mask"].sum()), 384)
    assert batch.padded_shape == (3, tok["input_ids"].shape[1], 384)

    hidden, mask = pad(torch.from_numpy(batch.tokens), torch.from_numpy(batch.lengths))
    with torch.no_grad():
        want = bottom(tok["input_ids"], tok["attention_mask"])
    assert torch.equal(mask, tok["attention_mask"])
    real = mask.bool()
    assert float((hidden[real] - want[real]).abs().max()) < ATOL
    assert np.all(hidden[~real].numpy() == 0)
