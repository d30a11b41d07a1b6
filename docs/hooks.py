"""MkDocs hooks: the configuration reference is generated from the pydantic models and the layout map from the
modules' docstrings, both at build time, so neither is a copy that can drift."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("fedsim", "edge", "server", "dashboard")  # the top-level packages, as the layout map lists them
SENTENCE_END = re.compile(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)(?<!\bvs)(?<!\bcf)\.\s+(?=[A-Z`(])")
RENDERED_ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|exc):(<code>)")
ROLE = re.compile(r":(?:mod|class|func|meth|attr|data):`~?([^`]+)`")


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    if "<!-- config-reference -->" in markdown:
        from fedsim.config.reference import reference_markdown

        markdown = markdown.replace("<!-- config-reference -->", reference_markdown())
    if "<!-- split-reference -->" in markdown:
        from fedsim.config.reference import model_reference
        from fedsim.config.sweep import SweepConfig
        from fedsim.split.config import SplitConfig

        split, sweep = model_reference("split", SplitConfig, 3), model_reference("sweep", SweepConfig, 3)
        markdown = markdown.replace("<!-- split-reference -->", split).replace("<!-- sweep-reference -->", sweep)
    if "<!-- layout -->" in markdown:
        markdown = markdown.replace("<!-- layout -->", layout_markdown(ROOT))
    return markdown


def on_page_content(html: str, **kwargs: Any) -> str:
    """The API reference's docstrings use Sphinx roles (``:class:`x` ``); shown as plain code, not raw."""
    return RENDERED_ROLE.sub(r"\1", html)


def summary_line(path: Path, cap: int = 240) -> str:
    """The first sentence of a module's docstring (cut at a word past ``cap`` characters), its Sphinx roles as
    plain code."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    paragraph = " ".join(doc.split("\n\n")[0].split())
    sentence = SENTENCE_END.split(paragraph, maxsplit=1)[0].rstrip(":")
    if len(sentence) > cap:
        sentence = sentence[:cap].rsplit(" ", 1)[0] + " …"
    return ROLE.sub(lambda m: f"``{m[1]}``", sentence).replace("|", "\\|")


def layout_markdown(root: Path) -> str:
    """Every package of the repository, what it is, and each of its modules in one line (generated wire stubs
    left out), from the docstrings."""
    parts = []
    for top in PACKAGES:
        for init in sorted((root / top).rglob("__init__.py")):
            package = init.parent
            rows = [
                f"| `{module.name}` | {summary_line(module)} |"
                for module in sorted(package.glob("*.py"))
                if module.name != "__init__.py" and not module.stem.endswith(("_pb2", "_pb2_grpc"))
            ]
            parts.append(f"### `{package.relative_to(root)}/`\n\n{summary_line(init, cap=1000)}\n")
            if rows:
                parts.append("| module | what it is |\n| --- | --- |\n" + "\n".join(rows) + "\n")
    return "\n".join(parts)
