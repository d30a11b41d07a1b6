"""LEAF's federated JSON (Caldas et al., 2018): every user is a client.

A LEAF file is ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}``;
a split may come as several files in one directory. FEMNIST's ``x`` are flat lists of 784 floats and ``y``
class indices; Shakespeare's ``x`` are 80-character strings and ``y`` the next character. Characters become
indices into LEAF's own 80-letter alphabet, so a Shakespeare model sees the indices LEAF's reference code does.
"""

from __future__ import annotations

import json
import tempfile
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedsim.config import ConfigError, LeafData
from fedsim.data.base import ArrayDataset, ClientData, FederatedDataset

LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
_INDEX = {c: i for i, c in enumerate(LETTERS)}


def _files(path: Path) -> list[Path]:
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    if not files:
        raise ConfigError(f"{path}: no .json files (expected LEAF's JSON)")
    return files


def read_users(path: Path) -> dict[str, dict[str, list[Any]]]:
    """Every user's ``{"x", "y"}`` of a LEAF split, in file order; a ConfigError naming what is not LEAF."""
    users: dict[str, dict[str, list[Any]]] = {}
    for file in _files(path):
        _read_file(file, users)
    return users


def _read_file(file: Path, users: dict[str, dict[str, list[Any]]]) -> None:
    """Add one LEAF file's users to ``users`` (a user split over files gets its samples concatenated)."""
    try:
        tree = json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{file}: not JSON ({type(exc).__name__})") from None
    if not isinstance(tree, dict) or not isinstance(tree.get("users"), list):
        raise ConfigError(f"{file}: not LEAF JSON (no 'users' list)")
    data = tree.get("user_data")
    if not isinstance(data, dict):
        raise ConfigError(f"{file}: not LEAF JSON (no 'user_data' mapping)")
    for user in tree["users"]:
        record = data.get(user)
        if (
            not isinstance(record, dict)
            or not isinstance(record.get("x"), list)
            or not isinstance(record.get("y"), list)
        ):
            raise ConfigError(f"{file}: user {str(user)[:40]!r} has no 'x' and 'y' lists in 'user_data'")
        if len(record["x"]) != len(record["y"]):
            raise ConfigError(f"{file}: user {str(user)[:40]!r} has {len(record['x'])} x but {len(record['y'])} y")
        users.setdefault(str(user), {"x": [], "y": []})
        users[str(user)]["x"] += record["x"]
        users[str(user)]["y"] += record["y"]


def _arrays(xs: list[Any], ys: list[Any], where: Path) -> tuple[np.ndarray, np.ndarray]:
    """Features as float32 (characters as alphabet indices) and labels as int64."""
    if xs and isinstance(xs[0], str):
        try:
            x = np.array([[_INDEX[c] for c in s] for s in xs], dtype=np.float32)
            y = np.array([_INDEX[c] for c in ys], dtype=np.int64)
        except KeyError as exc:
            raise ConfigError(f"{where}: character {exc.args[0]!r} is not in LEAF's alphabet") from None
        except ValueError:
            raise ConfigError(f"{where}: text samples of unequal length") from None
        return x, y
    try:
        return np.asarray(xs, dtype=np.float32), np.asarray(ys, dtype=np.int64)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: samples are neither numbers nor strings of equal length") from None


def leaf(cfg: LeafData) -> FederatedDataset:
    """The first ``cfg.clients`` training users as clients, and every test user's samples as the test split."""
    if cfg.lazy:
        return LeafOnDisk(cfg)
    train = read_users(cfg.train)
    if len(train) < cfg.clients:
        raise ConfigError(f"data.clients={cfg.clients}, but {cfg.train} has {len(train)} users")
    chosen = list(train)[: cfg.clients]
    test = read_users(cfg.test)
    x, y = _samples(train, chosen, cfg.train)
    tx, ty = _samples(test, list(test), cfg.test)
    if len(tx) == 0 or x.shape[1:] != tx.shape[1:]:
        raise ConfigError(
            f"{cfg.test}: test samples of shape {list(tx.shape[1:])} do not match training {list(x.shape[1:])}"
        )
    classes = _classes(train[chosen[0]]["x"], y, ty)
    sizes = np.array([len(train[u]["y"]) for u in chosen])
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    parts = [np.arange(lo, hi) for lo, hi in pairwise(bounds)]
    test_data = ClientData(torch.from_numpy(tx), torch.from_numpy(ty))
    return ArrayDataset(x, y, parts, test_data, num_classes=classes)


def _samples(users: dict[str, dict[str, list[Any]]], chosen: list[str], where: Path) -> tuple[np.ndarray, np.ndarray]:
    """The ``chosen`` users' samples, in order, as arrays."""
    return _arrays([s for u in chosen for s in users[u]["x"]], [s for u in chosen for s in users[u]["y"]], where)


def _classes(first_xs: list[Any], y: np.ndarray, ty: np.ndarray) -> int:
    text = bool(first_xs) and isinstance(first_xs[0], str)
    return len(LETTERS) if text else int(max(y.max(initial=0), ty.max(initial=0))) + 1


class LeafOnDisk:
    """LEAF's training users written, one JSON file at a time, to memory-mapped ``.npy`` files in a temporary
    directory: at most one file's users are in memory while reading, and a client's samples are read from disk
    when it trains. Each user must sit in one file (LEAF's own splits do)."""

    def __init__(self, cfg: LeafData) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="fedsim-leaf-")
        self._chunks: list[tuple[np.ndarray, np.ndarray]] = []  # per file: memory-mapped x, labels
        self._where: list[tuple[int, int, int]] = []  # client -> (chunk, first row, end row)
        seen: set[str] = set()
        first: list[Any] = []
        for k, file in enumerate(_files(cfg.train)):
            if len(self._where) == cfg.clients:
                break
            users: dict[str, dict[str, list[Any]]] = {}
            _read_file(file, users)
            again = sorted(seen.intersection(users))
            if again:
                raise ConfigError(f"{file}: user {again[0]!r} is also in an earlier file (lazy needs one file each)")
            seen.update(users)
            chosen = list(users)[: cfg.clients - len(self._where)]
            if not chosen:
                continue
            first = first or users[chosen[0]]["x"][:1]
            bounds = np.concatenate([[0], np.cumsum([len(users[u]["y"]) for u in chosen])])
            x, y = _samples(users, chosen, file)
            path = Path(self._dir.name) / f"x{k}.npy"
            np.save(path, x)
            del x, users
            self._chunks.append((np.load(path, mmap_mode="r"), y))
            self._where += [(len(self._chunks) - 1, int(lo), int(hi)) for lo, hi in pairwise(bounds)]
        if len(self._where) < cfg.clients:
            raise ConfigError(f"data.clients={cfg.clients}, but {cfg.train} has {len(self._where)} users")
        test = read_users(cfg.test)
        tx, ty = _samples(test, list(test), cfg.test)
        self.input_shape = tuple(self._chunks[0][0].shape[1:])
        if len(tx) == 0 or tuple(tx.shape[1:]) != self.input_shape:
            raise ConfigError(
                f"{cfg.test}: test samples of shape {list(tx.shape[1:])} do not match training {list(self.input_shape)}"
            )
        self.test = ClientData(torch.from_numpy(tx), torch.from_numpy(ty))
        self.num_classes = _classes(first, np.concatenate([y for _, y in self._chunks]), ty)
        self.num_clients = cfg.clients

    def client(self, cid: int) -> ClientData:
        chunk, lo, hi = self._where[cid]
        x, y = self._chunks[chunk]
        return ClientData(torch.from_numpy(np.array(x[lo:hi])), torch.from_numpy(y[lo:hi]))

    def n_samples(self, cid: int) -> int:
        _, lo, hi = self._where[cid]
        return hi - lo
