"""Reading back what trackers wrote, with their own tools."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any


def wandb_records(out: Path) -> list[dict[str, Any]]:
    """Every record of the W&B offline run under ``out/wandb``, as ``wandb leet inspect --json`` prints it."""
    (log,) = (out / "wandb").glob("offline-run-*/run-*.wandb")
    # the interpreter's own environment first: a venv's python run without activating the venv
    wandb = shutil.which("wandb", path=str(Path(sys.executable).parent)) or shutil.which("wandb")
    assert wandb is not None
    text = subprocess.run([wandb, "leet", "inspect", "--json", str(log)], capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    return [json.loads(line) for line in text.stdout.splitlines() if line.startswith("{")]
