"""A client's state as a file: checksummed safetensors, written atomically, read back checked.

Each file carries a CRC-32 of its tensors in its metadata, checked on every read, so a flipped or truncated
file is :class:`StateDamaged` naming the client and the file, not silently wrong training.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import tempfile
import zlib
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import Tensor

ClientState = dict[str, Tensor]


class StateStoreError(RuntimeError):
    """A client's state cannot be loaded; the message names the client and the file."""


class StateDamaged(StateStoreError):
    """A client's file is there but truncated or altered."""

    def __init__(self, message: str, cid: int, path: Path) -> None:
        super().__init__(message)
        self.cid, self.path = cid, path


def file_name(cid: int) -> str:
    return f"client-{cid}.safetensors"


def cid_of(path: Path) -> int:
    return int(path.name.removeprefix("client-").removesuffix(".safetensors"))


CHECKSUM = "fedsim.crc32"  # safetensors metadata key: CRC-32 of the tensors' bytes in key order
TEMP_SUFFIX = ".tmp"
FICLONE = 0x40049409  # Linux ioctl: a copy-on-write clone (btrfs, XFS, ...)


def save_tensors(tensors: dict[str, Tensor], path: str | Path, metadata: dict[str, str] | None = None) -> None:
    """safetensors' ``save_file``, whose I/O failures (a full disk) come back as the ``OSError`` they are."""
    try:
        save_file(tensors, path, metadata=metadata)
    except SafetensorError as exc:
        found = re.search(r"\(os error (\d+)\)", str(exc))
        if found is None:
            raise
        code = int(found.group(1))
        raise OSError(code, os.strerror(code), str(path)) from None


def checksum(state: ClientState) -> str:
    crc = 0
    for key in sorted(state):
        crc = zlib.crc32(key.encode(), crc)
        crc = zlib.crc32(state[key].contiguous().view(-1).view(torch.uint8).numpy().tobytes(), crc)
    return f"{crc:08x}"


def write_atomic(path: Path, state: ClientState, fsync: bool = True) -> None:
    """Write ``state`` to ``path`` so that a crash never leaves a partial file under that name."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        os.close(fd)
        tensors = {k: v.contiguous() for k, v in state.items()}
        save_tensors(tensors, tmp, metadata={CHECKSUM: checksum(tensors)})
        if fsync:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a crash never leaves a partial file under that name (summary.json:
    what a reader and ``fedsim resume`` trust)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMP_SUFFIX, dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def link_or_copy(src: str | Path, dst: str | Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def clone_or_copy(src: str | Path, dst: str | Path) -> None:
    """A file of its own at ``dst``: a copy-on-write clone where the file system has them, else a copy."""
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        try:
            fcntl.ioctl(fout.fileno(), FICLONE, fin.fileno())
        except OSError:
            shutil.copyfileobj(fin, fout, 1 << 20)
    shutil.copystat(src, dst)


def read_state(path: Path, cid: int) -> ClientState:
    """Load and check a client's file; :class:`StateStoreError` names the client and the file."""
    try:
        with safe_open(path, framework="pt") as fh:
            expected = (fh.metadata() or {}).get(CHECKSUM)
        state = load_file(path)
    except (SafetensorError, OSError, ValueError) as exc:
        raise StateDamaged(f"cannot load state of client {cid} from {path}: {exc}", cid, path) from None
    if expected is not None and checksum(state) != expected:
        message = f"state of client {cid} in {path} does not match its checksum (the file is damaged)"
        raise StateDamaged(message, cid, path)
    return state


def remove_temporaries(directory: Path) -> int:
    """Delete what killed writes left in a state directory (``.client-*.tmp`` files, ``.freeze-*``
    staging directories); returns how many. Called on resume, before the state is rebuilt."""
    if not directory.is_dir():
        return 0
    left = [*directory.glob(f".client-*{TEMP_SUFFIX}"), *directory.glob(".freeze-*")]
    for path in left:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return len(left)
