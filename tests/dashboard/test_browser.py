"""A real browser on the live dashboard: a running simulation's round count rises on the page without a reload.

Needs Debian's chromium and chromium-driver (.ci/run installs them and sets FEDSIM_BROWSER=required, so there a
missing browser fails instead of skipping). ``FEDSIM_SCREENSHOT=docs/img/dashboard.png pytest -m browser``
refreshes the README's screenshot.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fedsim.runstore import RunStore, RunStoreError

pytestmark = pytest.mark.browser

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
REPO = Path(__file__).resolve().parents[2]
FEDSIM = str(Path(sys.executable).parent / "fedsim")


@pytest.fixture
def chromium() -> None:
    if CHROMIUM.exists() and CHROMEDRIVER.exists():
        return
    message = "Debian's chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
    if os.environ.get("FEDSIM_BROWSER") == "required":
        pytest.fail(message)
    pytest.skip(message)


def wait_for(check: Callable[[], object], seconds: float, what: str) -> object:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"waited {seconds:.0f} s for {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(command: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as sink:  # the child keeps its own handle
        return subprocess.Popen(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.fixture
def running_simulation(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """The quickstart stretched to 5000 rounds on 2 devices, running in the background: its store and run id."""
    db = tmp_path / "runs.db"
    command = [
        FEDSIM,
        "run",
        "examples/quickstart.yaml",
        "--set",
        "rounds=5000",
        "--set",
        "eval_every=1",
        "--devices",
        "2",
    ]
    proc = start([*command, "--out", str(tmp_path / "out"), "--db", str(db)], tmp_path / "run.log")
    try:

        def first_round() -> str | None:
            assert proc.poll() is None, (tmp_path / "run.log").read_text()
            if not db.exists():
                return None
            try:
                with RunStore.open_readonly(db) as store:
                    runs = store.list_runs()
            except RunStoreError:  # the file exists a moment before its schema does
                return None
            return runs[0].run_id if runs and runs[0].rounds_done > 0 else None

        run_id = wait_for(first_round, 120, "the simulation's first round")
        yield db, str(run_id)
    finally:
        stop(proc)


@pytest.fixture
def dashboard(running_simulation: tuple[Path, str], tmp_path: Path) -> Iterator[str]:
    """``fedsim dashboard`` over the running simulation's store: the run page's address."""
    db, run_id = running_simulation
    port = free_port()
    proc = start([FEDSIM, "dashboard", "--db", str(db), "--port", str(port)], tmp_path / "dashboard.log")

    def healthy() -> bool:
        assert proc.poll() is None, (tmp_path / "dashboard.log").read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    try:
        wait_for(healthy, 60, "the dashboard to answer")
        yield f"http://127.0.0.1:{port}/?run={run_id}"
    finally:
        stop(proc)


def test_running_runs_round_count_rises_without_a_reload(chromium: None, dashboard: str, tmp_path: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,2000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.get(dashboard)

        def rounds_shown() -> int | None:
            for metric in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetric"]'):
                found = re.fullmatch(r"rounds\s+(\d+)/5000", metric.text.strip())
                if found:
                    return int(found.group(1))
            return None

        wait_for(lambda: len(driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")) >= 3, 90, "the charts")
        driver.execute_script("window.fedsimLoaded = true")  # a reload would forget it
        first = wait_for(rounds_shown, 30, "the rounds metric")
        assert isinstance(first, int)

        def more_rounds() -> int | None:
            shown = rounds_shown()
            return shown if shown is not None and shown > first else None

        later = wait_for(more_rounds, 45, f"more than {first} rounds")
        assert isinstance(later, int) and later > first
        assert driver.execute_script("return window.fedsimLoaded === true")  # the same page, not a reload
        shot = Path(os.environ.get("FEDSIM_SCREENSHOT", tmp_path / "dashboard.png"))
        shot.parent.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(shot))
    finally:
        driver.quit()
