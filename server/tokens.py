"""Per-device tokens: the server reads ``device token`` lines (a device reads its one token in ``edge.client``)."""

from __future__ import annotations

import hmac
from pathlib import Path

from fedsim.config import ConfigError

MIN_TOKEN = 16  # characters: a guessable token is refused when the file is read, not after a breach


def load_tokens(path: Path) -> dict[str, str]:
    """``{device: token}`` from a file of ``device token`` lines (``#`` starts a comment)."""
    if not path.is_file():
        raise ConfigError(f"{path}: token file not found")
    tokens: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise ConfigError(f"{path}:{lineno}: expected 'device token'")
        device, token = parts
        if device in tokens:
            raise ConfigError(f"{path}:{lineno}: device {device!r} listed twice")
        if len(token) < MIN_TOKEN:
            raise ConfigError(f"{path}:{lineno}: token of {device!r} is shorter than {MIN_TOKEN} characters")
        tokens[device] = token
    if not tokens:
        raise ConfigError(f"{path}: no 'device token' lines")
    return tokens


def token_matches(tokens: dict[str, str], device: str, token: str) -> bool:
    """Constant-time check; an unknown device costs the same comparison as a wrong token."""
    expected = tokens.get(device, "\0" * MIN_TOKEN)
    return hmac.compare_digest(expected.encode(), token.encode()) and device in tokens
