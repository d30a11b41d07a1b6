"""The configuration reference is complete: every field of every section and variant (each dataset, partition,
privacy kind, algorithm and its schedule, the split and sweep files) is listed with a description."""

from __future__ import annotations

import re
import subprocess
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RENDER = """import runpy, sys
hooks = runpy.run_path("docs/hooks.py")
sys.stdout.write(hooks["on_page_markdown"](open("docs/reference/configuration.md").read()))
"""


@cache
def _page() -> str:
    """The page as the site builds it: in a fresh process, so that no kind a test registered is listed."""
    done = subprocess.run([sys.executable, "-c", RENDER], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout


def test_every_field_in_the_reference_has_a_description() -> None:
    heading, bare = "", []
    for line in _page().splitlines():
        if line.startswith("#"):
            heading = line.strip("# ")
        elif line.startswith("| `") and line.rstrip().endswith("|  |"):
            bare.append(f"{heading}: {line.split('|')[1].strip()}")
    assert not bare, f"{len(bare)} fields without a description: {bare}"


def test_the_variant_sections_list_their_fields() -> None:
    page = _page()
    for heading, field in [
        ("privacy.kind: central", "noise_multiplier"),
        ("privacy.kind: central", "target_epsilon"),
        ("privacy.kind: central", "accountant"),
        ("privacy.kind: central", "noise_cohort"),
        ("data.partition.kind: dirichlet", "alpha"),
        ("algorithm.lr_schedule", "kind"),
        ("split.train", "steps"),
        ("split.adapter", "r"),
        ("server_optimizer.kind: fedyogi", "tau"),
    ]:
        section = page.split(f"`{heading}`", 1)[1].split("\n#", 1)[0]
        assert re.search(rf"^\| `{field}` \|", section, re.MULTILINE), (heading, field)
