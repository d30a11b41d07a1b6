"""Codec names live in one registry: the docs' table, the config's validation and the wire all read it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fedsim.comm.codecs import CodecError, build_codec, codecs, register_codec
from fedsim.config import ConfigError
from fedsim.split.config import SplitConfig, validate

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_list_exactly_the_registered_codecs() -> None:
    page = (ROOT / "docs" / "how-to" / "split-fine-tuning.md").read_text()
    table = page.split("<!-- codecs:", 1)[1].split("<!-- /codecs -->", 1)[0]
    listed = re.findall(r"^\| `([^`]+)` \| (.+) \|$", table, flags=re.MULTILINE)
    assert listed == [(e.usage, e.summary) for e in codecs()]


def test_every_registered_codec_validates_in_a_split_config() -> None:
    for entry in codecs():
        spec = entry.usage.replace("RT,RH", "4,8").replace(":R", ":4")
        assert validate(SplitConfig, {"codec": spec}).codec == spec
        assert build_codec(spec).spec == spec
    with pytest.raises(ConfigError, match=r"^codec: unknown codec 'zip'; known: fp32, fp16, int8, lowrank:R"):
        validate(SplitConfig, {"codec": "zip"})


def test_a_name_is_registered_once_and_a_long_name_is_not_echoed_whole() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_codec("fp32", lambda arg: build_codec("fp32"))
    with pytest.raises(CodecError) as error:
        build_codec("x" * 10_000)
    assert len(str(error.value)) < 300 and "(10000 characters)" in str(error.value)
