"""pfl-research's benchmark shapes, written once for both sides of bench/vs_pfl.py: the data (synthetic, of the
benchmark's shape: enough for speed, and no download), the model and its initialisation, the optimisers. This
file imports only numpy and torch, so that pfl's own virtual environment can import it too.

``cifar10``: pfl's benchmarks/image_classification/configs/baseline.yaml: ``simple_cnn`` (two 3x3
convolutions of 32 and 64 channels, a 2x2 max-pool, dropout, a 128-unit dense layer, dropout, 10 outputs; 1.6M
parameters; inputs 32x32x3 channels-last, transposed inside the model as pfl's ``Transpose2D`` does), Glorot
uniform weights, 1,000 users x 50 images, cohort 50, one local epoch in batches of 10 at lr 0.1, central SGD at
lr 1.0, every user weighted alike.

``stackoverflow``: pfl's benchmarks/lm/configs/baseline.yaml: the next-word transformer (embeddings of 96
tied to the output layer, sinusoidal positions, 3 causal encoder layers of 8 heads, feed-forward 1,536,
dropout 0.1; 2.0M parameters) over a vocabulary of 10,004 (10,000 words and pad, out-of-vocabulary,
begin, end), sequences of 20 tokens, each user 64 sentences (the benchmark's ``max_user_sentences`` cap),
one local epoch in batches of 16 at lr 0.3, central Adam at lr 0.1 (betas 0.9, 0.99, epsilon 0.01; the
benchmark's 50-round warm-up is left out: it moves no time). The benchmark's cohort of 400 takes minutes a
round on a 2-core machine (a step is 3.8 GFLOP, about half of it the 10,004-way output layer); here 20 of 1,000 users a
round, 80 steps.

``femnist``: FLUTE's FEMNIST set-up (its experiments/cv_cnn_femnist: the CNN of Reddi et al. 2021 on 28x28
characters, which is pfl's ``simple_cnn`` on 28x28x1 with 62 outputs, 1.2M parameters; 10 clients a round of
3,400; batches of 20 at lr 0.1; central SGD at lr 1.0), each user 200 images (federated EMNIST's 671,585
training images over 3,400 users is 198 each). The users' images are windows into 60,000 distinct synthetic
ones (MNIST's count), so the data takes 190 MB, not 2 GB.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class Shape:
    """One workload: ``users`` x ``per_user`` samples of ``input_shape`` (images, or ``tokens`` sequences),
    ``classes`` labels (the vocabulary for tokens), ``cohort`` users a round, ``epochs`` local epochs in batches
    of ``batch`` at ``local_lr``, a ``central`` optimiser ("sgd" or "adam", whose epsilon is ``adaptivity``) at
    ``central_lr``; at most ``rows`` distinct samples, which users' windows share."""

    name: str
    users: int
    per_user: int
    input_shape: tuple[int, ...]
    classes: int
    cohort: int
    epochs: int
    batch: int
    local_lr: float
    central_lr: float
    central: str = "sgd"
    adaptivity: float = 0.0
    tokens: bool = False
    rows: int = 60_000

    @property
    def distinct(self) -> int:
        return min(self.rows, self.users * self.per_user)

    def user_rows(self, user: int) -> tuple[int, int]:
        """The [start, stop) rows ``user`` holds: consecutive users hold consecutive windows, wrapping around the
        distinct samples."""
        start = (user * self.per_user) % (self.distinct - self.per_user + 1)
        return start, start + self.per_user

    def steps_per_round(self) -> int:
        return self.cohort * self.epochs * math.ceil(self.per_user / self.batch)


SHAPES = {
    "cifar10": Shape("cifar10", 1000, 50, (32, 32, 3), 10, 50, 1, 10, 0.1, 1.0),
    "stackoverflow": Shape(
        "stackoverflow", 1000, 64, (20,), 10_004, 20, 1, 16, 0.3, 0.1, central="adam", adaptivity=0.01, tokens=True
    ),
    "femnist": Shape("femnist", 3400, 200, (28, 28, 1), 62, 10, 1, 20, 0.1, 1.0),
}


def shape_of(name: str) -> Shape:
    """The workload ``name``; with ``FEDSIM_TINY=1`` in the environment (bench/gpu.py's CPU smoke) 8 users of
    two batches each, 2 a round: the same code on the same model, in seconds."""
    shape = SHAPES[name]
    return tiny_shape(shape) if os.environ.get("FEDSIM_TINY") == "1" else shape


def tiny_shape(shape: Shape) -> Shape:
    """``shape`` at 8 users of two batches each, 2 a round."""
    return dataclasses.replace(shape, users=8, per_user=2 * shape.batch, cohort=2)


def synthetic(shape: Shape, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The distinct samples, the same for a seed on either side: float32 images in [0, 1) and int64 labels, or
    int64 token sequences (never the pad symbol 0) and the next token at each position."""
    rng = np.random.default_rng(seed)
    n = shape.distinct
    if shape.tokens:
        length = shape.input_shape[0]
        stream = rng.integers(1, shape.classes, size=(n, length + 1))
        return stream[:, :-1].copy(), stream[:, 1:].copy()
    x = rng.random((n, *shape.input_shape), dtype=np.float32)
    y = rng.integers(0, shape.classes, size=n).astype(np.int64)
    return x, y


class Transpose2D(nn.Module):
    """Channels-last images (N, H, W, C) to the (N, C, H, W) convolutions take, as pfl's model does."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.permute(0, 3, 1, 2)


def simple_cnn(shape: Shape, seed: int = 0) -> nn.Module:
    """pfl's ``simple_cnn`` with its Glorot-uniform weights, drawn from ``seed``."""
    torch.manual_seed(seed)
    side, channels = shape.input_shape[0], shape.input_shape[-1]
    flatten = ((side - 4) // 2) ** 2 * 64
    model = nn.Sequential(
        Transpose2D(),
        nn.Conv2d(channels, 32, kernel_size=(3, 3)),
        nn.ReLU(),
        nn.Conv2d(32, 64, kernel_size=(3, 3)),
        nn.ReLU(),
        nn.MaxPool2d((2, 2)),
        nn.Dropout(0.25),
        nn.Flatten(),
        nn.Linear(flatten, 128),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Linear(128, shape.classes),
    )
    for m in model.modules():
        if isinstance(m, nn.Conv2d | nn.Linear):
            nn.init.xavier_uniform_(m.weight)
    return model


class NextWordTransformer(nn.Module):
    """The benchmark's next-word transformer: token embeddings scaled by sqrt(width) plus sinusoidal positions,
        causal encoder layers, and logits against the same embedding matrix (tied weights). Token ids may come as
    floats (fedsim's ``ArrayDataset`` holds every input as float32, exact for ids below 2**24, and its own word
    models cast them the same way)."""

    def __init__(self, vocab: int, length: int, width: int = 96, heads: int = 8, ff: int = 1536, layers: int = 3):
        super().__init__()
        self.width = width
        self.embed = nn.Embedding(vocab, width, padding_idx=0)
        nn.init.uniform_(self.embed.weight, -0.05, 0.05)
        position = torch.arange(length, dtype=torch.float32)[:, None]
        rate = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10_000.0) / width))
        table = torch.zeros(length, width)
        table[:, 0::2], table[:, 1::2] = torch.sin(position * rate), torch.cos(position * rate)
        self.positions: torch.Tensor
        self.causal: torch.Tensor
        self.register_buffer("positions", table)
        self.register_buffer("causal", ~torch.tril(torch.ones(length, length, dtype=torch.bool)))
        layer = nn.TransformerEncoderLayer(width, heads, ff, 0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        x = self.embed(tokens.long()) * math.sqrt(self.width) + self.positions[:length]
        x = self.encoder(x, mask=self.causal[:length, :length])
        return x @ self.embed.weight.t()


def next_word_transformer(shape: Shape, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return NextWordTransformer(shape.classes, shape.input_shape[0])


MODELS = {"cifar10": simple_cnn, "stackoverflow": next_word_transformer, "femnist": simple_cnn}


def central_optimizer(shape: Shape, params: list[torch.nn.Parameter]) -> torch.optim.Optimizer:
    """pfl's central optimiser for the shape (fedsim's side is ``server_optimizer`` sgd or fedadam at these rates)."""
    if shape.central == "adam":
        return torch.optim.Adam(params, shape.central_lr, betas=(0.9, 0.99), eps=shape.adaptivity)
    return torch.optim.SGD(params, shape.central_lr)
