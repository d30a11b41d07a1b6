"""MkDocs hooks: the front page is the README (its links made relative to docs/), and the configuration
reference is generated from the pydantic models, both at build time, so neither is a copy that can drift."""

from __future__ import annotations

from pathlib import Path
from typing import Any

README = Path(__file__).resolve().parent.parent / "README.md"


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if "<!-- readme -->" in markdown:
        front = README.read_text(encoding="utf-8").replace("](docs/", "](")
        markdown = markdown.replace("<!-- readme -->", front)
    if "<!-- config-reference -->" in markdown:
        from fedsim.config.reference import reference_markdown

        markdown = markdown.replace("<!-- config-reference -->", reference_markdown())
    return markdown
