"""The LEAF benchmark's models (Caldas et al., 2018): the FEMNIST CNN and the Shakespeare character LSTM."""

from __future__ import annotations

import math

from torch import Tensor, nn

from fedsim.config import ConfigError
from fedsim.models.pool import MaxPool2x2


def femnist_cnn(
    input_shape: tuple[int, ...], num_classes: int, hidden: int = 2048, kind: str = "femnist_cnn"
) -> nn.Sequential:
    """LEAF's FEMNIST CNN: conv5x5(32) -> pool -> conv5x5(64) -> pool -> dense(``hidden``, 2048) -> classes, on
    28x28x1 (McMahan et al.'s MNIST CNN is the same at 512: :mod:`fedsim.models.fedavg_cnn`).

    A flat (784,) input is viewed as one 28x28 channel, as LEAF's JSON stores the images.
    """
    if math.prod(input_shape) != 28 * 28:
        raise ConfigError(f"model.kind={kind} needs 28x28 images; got input shape {list(input_shape)}")
    return nn.Sequential(
        nn.Unflatten(1, (1, 28, 28)) if len(input_shape) == 1 else nn.Identity(),
        nn.Conv2d(1, 32, 5, padding=2),
        nn.ReLU(),
        MaxPool2x2(),
        nn.Conv2d(32, 64, 5, padding=2),
        nn.ReLU(),
        MaxPool2x2(),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, hidden),
        nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )


class CharLSTM(nn.Module):
    """LEAF's Shakespeare model: 8-dim character embedding, two LSTM layers of ``hidden`` units, and the next
    character's logits from the last position. Inputs are character indices stored as floats (fedsim's client
    data are float tensors) and cast back here."""

    def __init__(self, vocab: int, embedding: int = 8, hidden: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embedding)
        self.lstm = nn.LSTM(embedding, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x: Tensor) -> Tensor:
        out, _ = self.lstm(self.embed(x.long()))
        logits: Tensor = self.head(out[:, -1])
        return logits


def shakespeare_lstm(input_shape: tuple[int, ...], num_classes: int, hidden: int = 256) -> CharLSTM:
    if len(input_shape) != 1:
        raise ConfigError(f"model.kind=shakespeare_lstm needs sequences of characters; got shape {list(input_shape)}")
    return CharLSTM(num_classes, hidden=hidden)
