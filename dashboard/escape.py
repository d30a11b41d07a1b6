"""Text from the run store shown as text: a run name is data, never Markdown or Plotly's HTML subset.

A name like ``![x](http://host/t.png)`` rendered as Markdown makes the browser fetch that URL, and Plotly turns
``<a href=...>`` in a legend into a live link. Run names fedsim writes now are restricted to letters, digits,
``.``, ``_`` and ``-``, but a store may hold names from older versions or other writers.
"""

from __future__ import annotations

import html
import re

_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#!|<>~$:])")  # special anywhere (':' starts emoji and icon codes)
_AUTOLINK = re.compile(r"(?i)(https?|ftp|www|mailto|xmpp)(?=\\?[:.])|@")  # where remark-gfm's autolinks start
WORD_JOINER = "\u2060"
_LINE_START = re.compile(r"^([-+>]|\d+(?=\.))")  # special only at the start: list items, quotes


def markdown_literal(text: str) -> str:
    """``text`` escaped so that Streamlit's Markdown shows it character for character; ``-`` and ``.`` inside a
    run id stay as they are. Escapes alone do not stop GitHub-flavoured autolinks (remark-gfm finds
    ``http://``, ``www.`` and ``a@b.c`` in the text after escapes are resolved), so an invisible word joiner
    goes inside each: shown the same, never a link."""
    escaped = _LINE_START.sub(_escape_start, _MARKDOWN.sub(r"\\\1", text))
    return _AUTOLINK.sub(lambda m: m.group(0) + WORD_JOINER, escaped)


def _escape_start(match: re.Match[str]) -> str:
    token = match.group(1)
    return f"{token}\\" if token.isdigit() else f"\\{token}"  # "12\\." is no list item, "\\-x" no bullet


def plotly_literal(text: str) -> str:
    """``text`` escaped for a Plotly trace name or label: its tags and entities are shown, not interpreted."""
    return html.escape(text, quote=False)
