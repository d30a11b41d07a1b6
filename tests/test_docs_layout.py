"""The layout pages name only what exists: the layout map is generated from the docstrings (every package has
one), and every path the hand-written pages name is in the repository."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import load_module

ROOT = Path(__file__).resolve().parent.parent
hooks = load_module("docs_hooks", ROOT / "docs" / "hooks.py")
PATH = re.compile(r"`([A-Za-z_./]+(?:/|\.py|\.toml|\.txt|\.yml))`")  # a path in code
FILE = re.compile(r"(?<![\w.`/])((?:[a-z_]+/)+[a-z_]+\.py)\b(?!:)")  # a module's path in prose
TREE = re.compile(r"^ {0,2}([a-z_.]+(?:/|\.py|\.toml|\.yml))(?: {2,}|$)", re.MULTILINE)  # a file tree's entry


def test_the_layout_map_lists_every_module_with_its_docstrings_first_sentence() -> None:
    page = hooks.on_page_markdown((ROOT / "docs" / "reference" / "layout.md").read_text())
    for top in hooks.PACKAGES:
        for module in (ROOT / top).rglob("*.py"):
            if module.stem.endswith(("_pb2", "_pb2_grpc")):
                continue
            summary = hooks.summary_line(module, cap=1000)
            assert summary, f"{module.relative_to(ROOT)} has no docstring: the layout map would say nothing of it"
            shown = f"`{module.parent.relative_to(ROOT)}/`" if module.name == "__init__.py" else f"`{module.name}`"
            assert shown in page, module
    assert "fedsim/sim/rounds/`" in page and "| `engine.py` | The round loop of a federated simulation. |" in page


def _exists(name: str) -> bool:
    if "/" in name.rstrip("/"):
        return any((base / name).exists() for base in (ROOT, ROOT / "fedsim", ROOT / "docs"))
    return any(ROOT.glob(f"**/{name.rstrip('/')}"))  # a bare file or package name, under its package's heading


def test_the_layout_and_design_pages_name_only_paths_that_exist() -> None:
    for page in ("reference/layout.md", "design.md"):
        text = (ROOT / "docs" / page).read_text()
        named = set(PATH.findall(text)) | set(FILE.findall(text)) | set(TREE.findall(text))
        missing = [name for name in named if not _exists(name)]
        assert named and not missing, (page, sorted(missing))
