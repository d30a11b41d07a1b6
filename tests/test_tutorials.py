"""Each tutorial page of the docs site runs top to bottom as a reader would run it: its code blocks in order, in
one scratch directory holding the repository's examples, so that a later block reads what an earlier one wrote.
A ``yaml`` block whose first line is ``# FILE`` is written to FILE; ``bash`` lines run in a shell (``fedsim`` is
the installed command); ``python`` blocks run as scripts. A block right under ``<!-- not run -->`` (an install,
a command that waits for you) is skipped, and ``text`` blocks show output. A failing block names its page and
line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEARN = ROOT / "docs" / "learn"
BLOCK = re.compile(r"(<!-- not run -->\n)?```(\w+)\n(.*?)\n```", re.DOTALL)
RUN = {"bash", "python", "yaml"}
SHOWN = {"text", "json", "console"}
# the data a page reads from ../shared, by the page's topic: a run without it skips the page rather than failing it
SST2 = ROOT.parent / "shared" / "data" / "sst2"
NEEDS = {"split-fine-tuning": SST2, "federated-adapters": SST2}


def _topic(page: str) -> str:
    """A page's name less its number in the learning path: ``8-split-fine-tuning.md`` is ``split-fine-tuning``."""
    return re.sub(r"^\d+-", "", page.removesuffix(".md"))


def steps(page: Path) -> list[tuple[int, str, str]]:
    """(line, language, code) of every block the page runs, in order."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in BLOCK.finditer(text):
        language = match[2]
        assert language in RUN | SHOWN, f"{page.name}: a {language} block, which this test neither runs nor shows"
        if match[1] or language in SHOWN:
            continue
        found.append((text[: match.start()].count("\n") + 1, language, match[3]))
    return found


def test_the_learning_path_has_its_pages_and_each_runs_something() -> None:
    pages = sorted(p.name for p in LEARN.glob("*.md"))
    assert len(pages) >= 9, pages
    assert all(steps(LEARN / page) for page in pages)
    # a page renamed or renumbered keeps its skip: each entry of NEEDS names a page there is
    assert set(NEEDS) <= {_topic(page) for page in pages}


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(p.name for p in LEARN.glob("*.md")))
def test_a_tutorial_runs_top_to_bottom(page: str, tmp_path: Path) -> None:
    if (needs := NEEDS.get(_topic(page))) is not None and not needs.is_dir():
        pytest.skip(f"needs {needs}")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "shared").symlink_to(ROOT.parent / "shared", target_is_directory=True)
    work = tmp_path / "work"  # ../shared/data from here, as from the repository's root
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    # the commands a page names (fedsim, torchrun) are this interpreter's environment's, activated or not
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": path}
    fedsim = shutil.which("fedsim", path=path) or f"{sys.executable} -m fedsim.cli"
    for line, language, code in steps(LEARN / page):
        where = f"docs/learn/{page}:{line}"
        if language == "yaml":
            first, _, rest = code.partition("\n")
            assert first.startswith("# "), f"{where}: a yaml block starts with '# FILE'"
            (work / first[2:].strip()).write_text(rest + "\n")
        elif language == "python":
            done = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"{where}:\n{done.stderr[-3000:]}"
        else:
            script = re.sub(r"(^|\n)(! )?fedsim ", rf"\1\2{fedsim} ", code)
            done = subprocess.run(["bash", "-ec", script], cwd=work, env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"{where}:\n{done.stdout[-1500:]}\n{done.stderr[-3000:]}"
