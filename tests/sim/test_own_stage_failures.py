"""A factory module that exits on import: one line, never a silent exit 0, refused before anything is written
(exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import refused


@pytest.mark.parametrize(("code", "shown"), [("0", "sys.exit(0)"), ("'usage: stage.py DIR'", "sys.exit('usage")])
def test_a_factory_module_exiting_on_import_is_one_line_exit_2(
    code: str, shown: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module = tmp_path / "inputs" / f"exits_{len(code)}.py"
    module.parent.mkdir()
    module.write_text(f"import sys\n\nsys.exit({code})\n")
    err = refused(tmp_path, capsys, ["rounds=3", f"server_stages=[{{factory: '{module}:Stage'}}]"])
    assert err.startswith(f"fedsim: error: server_stages.factory: '{module.stem}' exited on import ({shown}"), err
    assert "if __name__ == '__main__':" in err
