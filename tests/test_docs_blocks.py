"""Code blocks marked ``<!-- runnable -->`` in the README and the docs site run as a reader would run them:
shell lines and Python in a scratch directory that holds the repository's examples (what they write stays
there), YAML as a fragment of the quickstart's config, which must validate. A block that fails names its file
and line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fedsim.config import parse_config

ROOT = Path(__file__).resolve().parents[1]
MARK = "<!-- runnable -->"
BLOCK = re.compile(r"<!-- runnable -->\n```(\w+)\n(.*?)\n```", re.DOTALL)


def blocks() -> list[tuple[str, str, str]]:
    """(where, language, code) of every marked block."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text[: match.start()].count("\n") + 2
            found.append((f"{page.relative_to(ROOT)}:{line}", match[1], match[2]))
        assert text.count(MARK) == len(BLOCK.findall(text)), f"{page}: a runnable mark not right above a block"
    return found


def _merged(base: dict[str, Any], part: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in part.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    return tmp_path


def test_the_readme_and_the_docs_mark_blocks_to_run() -> None:
    where = {w.split(":")[0] for w, _, _ in blocks()}
    assert "README.md" in where and any(w.startswith("docs/") for w in where)


@pytest.mark.slow
@pytest.mark.parametrize(("where", "language", "code"), blocks(), ids=[b[0] for b in blocks()])
def test_a_runnable_block_runs(where: str, language: str, code: str, scratch: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FEDSIM_DOCS_BLOCK": where}
    if language == "yaml":
        quickstart = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
        parse_config(_merged(quickstart, yaml.safe_load(code)))
    elif language == "python":
        done = subprocess.run([sys.executable, "-c", code], cwd=scratch, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{where}:\n{done.stderr[-3000:]}"
    elif language == "bash":
        fedsim = shutil.which("fedsim") or f"{sys.executable} -m fedsim.cli"
        for line in (s for s in code.splitlines() if s.strip() and not s.lstrip().startswith("#")):
            command = re.sub(r"^fedsim ", f"{fedsim} ", line.split("  #")[0].strip())
            done = subprocess.run(command, shell=True, cwd=scratch, env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"{where}: {line}\n{done.stderr[-3000:]}"
    else:
        pytest.fail(f"{where}: a runnable block in {language}, which this test does not run")
