"""docs/benchmarks.md is a reference, not a log: short, no history words, and every table with the command that
printed it and the commit it measured (the machine is the page's, unless a section names another)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "benchmarks.md"
HISTORY = re.compile(r"\bissue\s*\d+|\bsession\b|\bfirst pieces\b|\bthis wave\b|\bsecond pass\b|\bnot met yet\b", re.I)
COMMIT = re.compile(r"\b[0-9a-f]{7,40}\b")
COMMAND = re.compile(r"(bench/\w+\.(py|sh)|fedsim run)")  # a script named, with its arguments


def _sections(text: str) -> list[tuple[str, str]]:
    parts = re.split(r"^(#{2,3} .*)$", text, flags=re.MULTILINE)
    return [(parts[i].strip(), parts[i + 1]) for i in range(1, len(parts) - 1, 2)]


def test_the_benchmarks_page_is_short_and_says_no_history() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 800
    assert not HISTORY.findall(text), HISTORY.findall(text)


def test_every_table_names_its_command_and_commit() -> None:
    text = PAGE.read_text(encoding="utf-8")
    sections = _sections(text)
    assert len(sections) > 20
    for heading, body in sections:
        if "\n|---" not in body and "\n| ---" not in body:
            continue
        parent = next((b for h, b in reversed(sections[: sections.index((heading, body))]) if h.startswith("## ")), "")
        context = heading + body + (parent if heading.startswith("### ") else "")
        assert COMMAND.search(context), f"{heading}: no command"
        assert COMMIT.search(body) or heading.startswith("## The GPU table"), f"{heading}: no commit"
