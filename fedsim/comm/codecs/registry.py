"""The one list of codec names: config validation, ``fedsim codecs``, the gRPC service and the docs read it.

A codec is registered under a name with a factory that receives the text after ``:`` in a spec (``""`` when
there is none) and raises :class:`CodecError` when it cannot make sense of it. ``usage`` is how the name is
written with its arguments (``lowrank:R``); ``summary`` one line for listings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fedsim.comm.codecs.base import Codec, CodecError

CodecFactory = Callable[[str], Codec]
MAX_SPEC = 64  # characters of a spec quoted back in an error: an oversized name is not echoed whole


@dataclass(frozen=True)
class CodecEntry:
    name: str
    usage: str
    summary: str
    factory: CodecFactory


_CODECS: dict[str, CodecEntry] = {}


def register_codec(name: str, factory: CodecFactory, usage: str | None = None, summary: str = "") -> None:
    """Make ``name`` (or ``name:ARGS``) a codec every part of fedsim accepts; a name may be registered once."""
    if not name or ":" in name or name != name.strip():
        raise ValueError(f"codec name {name!r} must be non-empty, without ':' or surrounding spaces")
    if name in _CODECS:
        raise ValueError(f"codec {name!r} is already registered")
    _CODECS[name] = CodecEntry(name, usage or name, summary, factory)


def unregister_codec(name: str) -> None:
    """Forget ``name`` (tests that register a codec of their own clean up with this)."""
    _CODECS.pop(name, None)


def codecs() -> list[CodecEntry]:
    """Every registered codec, in registration order."""
    return list(_CODECS.values())


def codec_usages() -> str:
    """``fp32 | fp16 | ... | tucker:RT,RH``: how each codec is written (each may end in ``+zstd``)."""
    return " | ".join(entry.usage for entry in _CODECS.values())


def build_codec(spec: str) -> Codec:
    """The codec named ``spec``; :class:`CodecError` naming the known codecs otherwise. Any spec followed by
    ``+zstd`` is that codec with its payload Zstandard-compressed (lossless)."""
    if spec.endswith("+zstd") and len(spec) > len("+zstd"):
        from fedsim.comm.codecs.entropy import ZstdCodec

        return ZstdCodec(build_codec(spec[: -len("+zstd")]))
    name, _, arg = spec.partition(":")
    entry = _CODECS.get(name)
    if entry is None:
        shown = spec if len(spec) <= MAX_SPEC else f"{spec[:MAX_SPEC]}... ({len(spec)} characters)"
        raise CodecError(f"unknown codec {shown!r}; known: {', '.join(e.usage for e in _CODECS.values())}")
    return entry.factory(arg)
