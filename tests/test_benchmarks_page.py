"""docs/benchmarks.md is a reference, not a log: short, no history words, and every table with the command that
printed it and the commit it measured (the machine is the page's, unless a section names another)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

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


def _history() -> set[str] | None:
    """Every commit reachable in this checkout (full hashes), or None where there is no whole history to read (no
    git, no repository, or a shallow clone)."""
    try:
        shallow = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--is-shallow-repository"], capture_output=True)
        if shallow.returncode != 0 or shallow.stdout.strip() != b"false":
            return None
        done = subprocess.run(["git", "-C", str(ROOT), "rev-list", "--all"], capture_output=True, text=True)
    except OSError:
        return None
    return set(done.stdout.split()) if done.returncode == 0 else None


def test_every_commit_the_page_cites_is_in_the_history() -> None:
    """A figure's commit is where a reader checks it out to measure again: one that is not in `git log` (lost to a
    rewrite) leaves the figure without its source."""
    history = _history()
    if history is None:
        pytest.skip("no whole git history here (not a clone, or a shallow one)")
    cited = set(COMMIT.findall(PAGE.read_text(encoding="utf-8")))
    missing = sorted(c for c in cited if not any(full.startswith(c) for full in history))
    assert not missing, f"docs/benchmarks.md cites commits that are not in the history: {', '.join(missing)}"
