"""LEAF's federated JSON (Caldas et al., 2018): every user is a client.

A LEAF file is ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}``;
a split may come as several files in one directory. FEMNIST's ``x`` are flat lists of 784 floats and ``y``
class indices; Shakespeare's ``x`` are 80-character strings and ``y`` the next character. Characters become
indices into LEAF's own 80-letter alphabet, so a Shakespeare model sees the indices LEAF's reference code does.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedsim.config import ConfigError, LeafData
from fedsim.data.base import ArrayDataset, ClientData

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
    return users


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


def leaf(cfg: LeafData) -> ArrayDataset:
    """The first ``cfg.clients`` training users as clients, and every test user's samples as the test split."""
    train = read_users(cfg.train)
    if len(train) < cfg.clients:
        raise ConfigError(f"data.clients={cfg.clients}, but {cfg.train} has {len(train)} users")
    chosen = list(train)[: cfg.clients]
    test = read_users(cfg.test)
    x, y = _arrays([s for u in chosen for s in train[u]["x"]], [s for u in chosen for s in train[u]["y"]], cfg.train)
    tx, ty = _arrays([s for r in test.values() for s in r["x"]], [s for r in test.values() for s in r["y"]], cfg.test)
    if len(tx) == 0 or x.shape[1:] != tx.shape[1:]:
        raise ConfigError(
            f"{cfg.test}: test samples of shape {list(tx.shape[1:])} do not match training {list(x.shape[1:])}"
        )
    text = bool(train[chosen[0]]["x"]) and isinstance(train[chosen[0]]["x"][0], str)
    classes = len(LETTERS) if text else int(max(y.max(initial=0), ty.max(initial=0))) + 1
    sizes = np.array([len(train[u]["y"]) for u in chosen])
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    parts = [np.arange(lo, hi) for lo, hi in pairwise(bounds)]
    test_data = ClientData(torch.from_numpy(tx), torch.from_numpy(ty))
    return ArrayDataset(x, y, parts, test_data, num_classes=classes)
