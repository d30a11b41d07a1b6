"""The next-word LSTM of StackOverflow next-word prediction (Reddi et al., ICLR 2021): an embedding, one LSTM
layer, and the next token's logits at every position (theirs: vocabulary 10,004, embedding 96, 670 units)."""

from __future__ import annotations

from torch import Tensor, nn

from fedsim.config import ConfigError


class NextWordLSTM(nn.Module):
    """Token ids ``(batch, length)`` (floats, cast back here) -> logits ``(batch, length, vocab)``."""

    def __init__(self, vocab: int, embedding: int = 96, hidden: int = 670) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, embedding)
        self.lstm = nn.LSTM(embedding, hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, x: Tensor) -> Tensor:
        out, _ = self.lstm(self.embed(x.long()))
        logits: Tensor = self.head(out)
        return logits


def next_word_lstm(input_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...]) -> NextWordLSTM:
    """``hidden``: ``(units,)`` or ``(embedding, units)``."""
    if len(input_shape) != 1:
        raise ConfigError(f"model.kind=next_word_lstm needs sequences of tokens; got shape {list(input_shape)}")
    if len(hidden) not in (1, 2):
        raise ConfigError(f"model.hidden for next_word_lstm is [units] or [embedding, units]; got {list(hidden)}")
    embedding, units = (96, hidden[0]) if len(hidden) == 1 else hidden
    return NextWordLSTM(num_classes, embedding, units)
