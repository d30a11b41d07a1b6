"""Text as token ids: a Hugging Face tokenizer read from a local directory, causal language modelling targets,
a cache of tokenised arrays, and the ``text`` dataset (one file of lines per client).

Sequences are padded on the right to ``max_length`` (longer ones cut). Inputs are the ids, as float32 (exact
below 2**24; fedsim's inputs are float tensors); next-token targets are the ids shifted left by one, with the
padding and the position after a sequence's last token set to ``IGNORE`` (-100, ``task.ignore_index``'s
default), so a causal model's logits at position t are scored against token t + 1.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedsim.config import ConfigError, TextData
from fedsim.config.text_data import PADDED_TARGET
from fedsim.data.base import ArrayDataset, ClientData

IGNORE = PADDED_TARGET  # -100, task.ignore_index's default: a run with another is refused (text_refusal)
# the files a tokenizer is read from: what the cache key hashes (a model directory's weights are left out)
TOKENIZER_FILES = (
    *("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json"),
    *("vocab.txt", "vocab.json", "merges.txt", "spiece.model", "tokenizer.model"),
)
CACHE_FORMAT = 1


@dataclass(frozen=True)
class Tokens:
    """``ids`` (n, max_length) int64, right-padded with ``pad_id``; ``lengths`` (n,) real tokens of each;
    ``vocab`` the tokenizer's ids (``len(tokenizer)``, added tokens included)."""

    ids: np.ndarray
    lengths: np.ndarray
    vocab: int
    pad_id: int


def tokenizer_dir(path: Path | None) -> Path:
    """``path``, or the packaged all-MiniLM-L6-v2's directory when None."""
    if path is not None:
        return Path(path)
    from fedsim.models.hf import default_path

    return default_path()


def load_tokenizer(path: Path | None) -> Any:
    """The tokenizer in ``path`` (local files only), padding on the right; one that has no pad token pads with
    its end-of-sequence token (GPT-2's), whose padded positions the targets and the model's mask leave out."""
    from transformers import AutoTokenizer

    where = tokenizer_dir(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, local_files_only=True)
    except (OSError, ValueError, TypeError) as exc:
        raise ConfigError(f"data.tokenizer: no tokenizer at {where} ({str(exc).splitlines()[0]})") from None
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ConfigError(f"data.tokenizer: the tokenizer at {where} has neither a pad nor an end-of-text token")
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "right"
    return tokenizer


def tokenise(texts: Sequence[str], tokenizer_path: Path | None, max_length: int, cache: Path | None) -> Tokens:
    """``texts`` as token ids; with ``cache``, read from (or written to) a file there keyed by the texts, the
    tokenizer's files and ``max_length``, so a second run skips the tokenizer (SST-2's 61,486 sentences: 11 s
    to tokenise, 0.2 s to read back, on a busy two-core machine)."""
    key_file = None
    if cache is not None:
        key_file = Path(cache) / f"tokens-{_key(texts, tokenizer_dir(tokenizer_path), max_length)}.npz"
        if key_file.is_file():
            with np.load(key_file) as kept:
                meta = kept["meta"]
                return Tokens(kept["ids"].astype(np.int64), kept["lengths"], int(meta[0]), int(meta[1]))
    tokenizer = load_tokenizer(tokenizer_path)
    encoded = tokenizer(list(texts), padding="max_length", truncation=True, max_length=max_length, return_tensors="np")
    ids = np.asarray(encoded["input_ids"], dtype=np.int64)
    tokens = Tokens(ids, np.asarray(encoded["attention_mask"]).sum(1), len(tokenizer), int(tokenizer.pad_token_id))
    if key_file is not None:
        _write(key_file, tokens)
    return tokens


def _key(texts: Sequence[str], where: Path, max_length: int) -> str:
    digest = hashlib.sha256(f"{CACHE_FORMAT}\0{max_length}\0".encode())
    for name in TOKENIZER_FILES:
        if (where / name).is_file():
            digest.update(name.encode() + b"\0" + hashlib.sha256((where / name).read_bytes()).digest())
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    return digest.hexdigest()[:32]


def _write(path: Path, tokens: Tokens) -> None:
    """Written to a temporary file and renamed: a run killed midway leaves no half file under the key."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp.npz")
        small = np.int32 if tokens.vocab < 2**31 else np.int64
        meta = np.array([tokens.vocab, tokens.pad_id], dtype=np.int64)
        np.savez(tmp, ids=tokens.ids.astype(small), lengths=tokens.lengths, meta=meta)
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError(f"data.cache: cannot write {path} ({exc.strerror or exc})") from None


def next_token_targets(tokens: Tokens) -> np.ndarray:
    """(n, max_length) int64: ``ids[:, t + 1]`` at position t, ``IGNORE`` from each sequence's last token on."""
    ids = tokens.ids
    targets = np.full_like(ids, IGNORE)
    targets[:, :-1] = ids[:, 1:]
    targets[np.arange(ids.shape[1])[None, :] >= tokens.lengths[:, None] - 1] = IGNORE
    return targets


def causal_lm_data(train: Tokens, parts: list[np.ndarray], test: Tokens) -> ArrayDataset:
    """Clients (``parts``: row indices of ``train``) and a test split of next-token prediction over the
    tokenizer's ``vocab`` ids."""
    test_split = ClientData(torch.from_numpy(test.ids.astype(np.float32)), torch.from_numpy(next_token_targets(test)))
    return ArrayDataset(train.ids.astype(np.float32), next_token_targets(train), parts, test_split, train.vocab)


def read_lines(path: Path) -> list[str]:
    """The non-blank lines of a UTF-8 text file, stripped."""
    try:
        return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read as UTF-8 text ({exc})") from None


def text_folder(cfg: TextData, seed: int) -> ArrayDataset:
    """The first ``cfg.clients`` ``*.txt`` files of ``cfg.dir`` in name order, one client each; the test split is
    ``cfg.test``'s lines, or the last ``test_fraction`` of each file's lines in an order shuffled by (seed, file)
    (every client keeps at least one line)."""
    files = sorted(Path(cfg.dir).glob("*.txt"))
    if cfg.test is not None:
        files = [f for f in files if f.resolve() != Path(cfg.test).resolve()]
    if len(files) < cfg.clients:
        raise ConfigError(f"data.dir: {cfg.dir} holds {len(files)} .txt files; data.clients is {cfg.clients}")
    train: list[str] = []
    held: list[str] = []
    parts: list[np.ndarray] = []
    for cid, path in enumerate(files[: cfg.clients]):
        lines = read_lines(path)
        if not lines:
            raise ConfigError(f"{path}: no text (a client's file holds one sentence or paragraph a line)")
        if cfg.test is None:
            order = np.random.default_rng([seed, cid]).permutation(len(lines))
            keep = max(1, len(lines) - int(len(lines) * cfg.test_fraction))
            held += [lines[i] for i in order[keep:]]
            lines = [lines[i] for i in np.sort(order[:keep])]
        parts.append(np.arange(len(train), len(train) + len(lines)))
        train += lines
    if cfg.test is not None:
        held = read_lines(Path(cfg.test))
    if not held:
        raise ConfigError("data.test: no test lines (name a test file, or raise test_fraction)")
    return causal_lm_data(
        tokenise(train, cfg.tokenizer, cfg.max_length, cfg.cache),
        parts,
        tokenise(held, cfg.tokenizer, cfg.max_length, cfg.cache),
    )
