"""A real browser on the live dashboard: a running simulation's round count rises on the page without a reload.

Needs Debian's chromium and chromium-driver (.ci/run installs them and sets FEDSIM_BROWSER=required, so there a
missing browser fails instead of skipping). ``FEDSIM_SCREENSHOT=docs/img/dashboard.png pytest -m browser``
refreshes the docs' screenshot (how-to/dashboard.md).
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
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

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


def headless_chrome(height: int) -> Any:
    """Debian's chromium, headless, 1400 pixels wide and ``height`` tall, under selenium."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size=1400,{height}"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)


T = TypeVar("T")


def wait_for(check: Callable[[], T], seconds: float, what: str) -> T:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"waited {seconds:.0f} s for {what}")


def settled(driver: Any, what: str, seconds: float = 60) -> None:
    """Wait until Streamlit's script has finished and the page no longer changes between two looks a quarter
    of a second apart (plotly draws its ticks, a grid sizes itself, after their elements appear)."""
    from selenium.webdriver.common.by import By

    running = '[data-testid^="stStatusWidgetRunning"]'
    seen: list[str] = [""]

    def still() -> bool:
        page = driver.page_source
        same, seen[0] = page == seen[0], page
        return same and not driver.find_elements(By.CSS_SELECTOR, running)

    wait_for(still, seconds, f"{what} to settle")


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


@contextmanager
def served(db: Path, log: Path) -> Iterator[str]:
    """``fedsim dashboard`` over ``db``, once it answers: its address."""
    port = free_port()
    proc = start([FEDSIM, "dashboard", "--db", str(db), "--port", str(port)], log)

    def healthy() -> bool:
        assert proc.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as reply:
                return bool(reply.status == 200)
        except OSError:
            return False

    try:
        wait_for(healthy, 60, "the dashboard to answer")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)


@contextmanager
def browsed(db: Path, tmp_path: Path, height: int) -> Iterator[tuple[Any, str]]:
    """A headless Chromium ``height`` pixels tall and ``fedsim dashboard`` over ``db``: (driver, address)."""
    driver = headless_chrome(height=height)
    try:
        with served(db, tmp_path / "dashboard.log") as address:
            yield driver, address
    finally:
        driver.quit()


@pytest.fixture
def dashboard(running_simulation: tuple[Path, str], tmp_path: Path) -> Iterator[str]:
    """``fedsim dashboard`` over the running simulation's store: the run page's address."""
    db, run_id = running_simulation
    with served(db, tmp_path / "dashboard.log") as address:
        yield f"{address}/?run={run_id}"


@pytest.mark.slow
def test_running_runs_round_count_rises_without_a_reload(chromium: None, dashboard: str, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    driver = headless_chrome(height=2000)
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


AXES = """
return Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => {
  const layout = gd._fullLayout, axes = [];
  for (const key of Object.keys(layout).filter(k => /^[xy]axis\\d*$/.test(k))) {
    const axis = layout[key];
    if (axis.visible === false) continue;
    axes.push({key: key, type: axis.type, title: (axis.title && axis.title.text) || '',
               ticks: (axis._vals || []).map(v => String(v.text))});
  }
  return axes;
});
"""
PICKED = """
const input = document.querySelector('[data-testid=stSidebar] input[aria-label=run]');
return input && input.value ? {value: input.value, fits: input.scrollWidth <= input.clientWidth} : null;
"""
PLAIN_TICK = re.compile(r"[\d,.]+%?")  # no minus sign, no SI suffix such as "1.001B"


@pytest.fixture
def finished_runs(onnx_bottom: Path, sst2_dir: Path, encoder: object, tmp_path: Path) -> tuple[Path, list[str]]:
    """A store as a user's looks after a while: the quickstart twice (one name, two runs), a split run, and
    a dozen more short runs: the ids of the two quickstarts and the split run."""
    from edge.onnx_bottom import EdgeEncoder
    from fedsim.cli import main
    from fedsim.split.model import minilm_path
    from fedsim.split.simulate import run_split
    from fedsim.split.trainer import CloudTrainer
    from tests.split_fixtures import split_config

    db = tmp_path / "runs.db"
    for k in range(2):
        argv = ["run", str(REPO / "examples/quickstart.yaml"), "--set", "rounds=10"]  # both quickstart-rounds10
        assert main([*argv, "--devices", "2", "--out", str(tmp_path / f"q{k}"), "--db", str(db)]) == 0
    cfg = split_config(
        name="split-demo",
        codec="int8",
        data={"dir": str(sst2_dir), "clients": 2},
        train={"steps": 12, "batch_size": 10, "eval_every": 4},
    )
    edge = EdgeEncoder(onnx_bottom, minilm_path(), max_length=16)
    split = run_split(cfg, tmp_path / "split", db, edge, CloudTrainer(cfg, encoder))  # type: ignore[arg-type]
    with RunStore(db) as store:
        quickstarts = [r.run_id for r in store.list_runs() if r.name == "quickstart-rounds10"]
        for k in range(12):
            store.finish_run(store.start_run(f"sweep-{k}", "simulation", {}, 1), "finished", None)
    return db, [*sorted(quickstarts), str(split["run_id"])]


@pytest.mark.slow
def test_every_page_type_reads_at_a_glance(
    chromium: None, finished_runs: tuple[Path, list[str]], tmp_path: Path
) -> None:
    """The runs page, a simulation's page and a split run's page in a real browser: whole-number round axes,
    bytes in kB/MB/GB, no negative ticks, same-named runs apart, the runs table without an inner scroll box.
    ``FEDSIM_SCREENSHOTS=docs/img`` saves each page there (runs.png, simulation.png, split.png)."""
    from selenium.webdriver.common.by import By

    db, (first, second, split) = finished_runs
    driver = headless_chrome(height=1900)
    shots = Path(os.environ.get("FEDSIM_SCREENSHOTS", tmp_path))
    dashboard = ExitStack()
    try:
        address = dashboard.enter_context(served(db, tmp_path / "dashboard.log"))
        driver.get(f"{address}/")
        table = wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, '[data-testid="stDataFrame"]'), 60, "runs")
        settled(driver, "the runs page")  # the grid sizes itself after it appears
        assert table[0].size["height"] >= 35 * (15 + 1)  # 15 runs and the header, no 10-row box
        driver.save_screenshot(str(shots / "runs.png"))

        for run_id, page, charts in ((first, "simulation", 3), (split, "split", 3)):
            driver.get(f"{address}/?run={run_id}")

            def drawn(n: int = charts) -> bool:
                return len(driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")) >= n

            wait_for(drawn, 60, page)
            settled(driver, page)  # every chart drawn, ticks included
            assert not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
            figures = driver.execute_script(AXES)
            assert len(figures) >= charts
            for axes in figures:
                for axis in axes:
                    if axis["type"] in ("category", "date"):
                        continue
                    bad = [t for t in axis["ticks"] if not PLAIN_TICK.fullmatch(t)]
                    assert not bad, (page, axis)
                    if axis["title"] in ("round", "step"):
                        assert all(float(t.replace(",", "")).is_integer() for t in axis["ticks"]), (page, axis)
                    if "per round" in axis["title"] or "per step" in axis["title"] or "cumulative" in axis["title"]:
                        assert re.search(r"\b(kB|MB|GB)\b", axis["title"]), (page, axis)
            driver.save_screenshot(str(shots / f"{page}.png"))

        labels = []
        for run_id in (first, second):  # the two quickstarts: told apart in the sidebar, and not cut off
            driver.get(f"{address}/?run={run_id}")
            shown = wait_for(lambda: driver.execute_script(PICKED), 60, "the sidebar's run label")
            assert isinstance(shown, dict)
            # "quicksta…ounds10 · 06:35:44": the name cut in its middle, the start time whole, all of it visible
            assert re.fullmatch(r"quick\S*ounds10 · \d\d:\d\d:\d\d", shown["value"]) and shown["fits"], shown
            labels.append(shown["value"])
        assert labels[0] != labels[1]
    finally:
        driver.quit()
        dashboard.close()


@pytest.mark.slow
def test_hostile_names_and_config_strings_are_never_links_on_any_page(chromium: None, tmp_path: Path) -> None:
    """Run names and strings from the store as a careless or hostile writer left them: a Markdown link, an HTML
    link and a bare URL, in the name, the summary and a membership event, on the runs page and each run's page.
    Nothing on the page may link anywhere but the dashboard itself."""
    from selenium.webdriver.common.by import By

    from fedsim.runstore import MemberRow, RoundRow

    db = tmp_path / "runs.db"
    names = ["[click me](http://evil.example/md)", "<a href='http://evil.example/html'>h</a>", "www.evil.example"]
    ids = []
    with RunStore(db) as store:  # the store does not judge names; an older fedsim or another writer wrote any
        for name in names:
            run_id = store.start_run(name, "simulation", {"accelerator": "http://evil.example/acc"}, 2)
            for r in range(2):
                store.log_round(run_id, RoundRow(run_id, r, 2.3, 0.25, 2.1, 100, 100, 0.1, 0.1, 64, 2), [])
            store.finish_run(run_id, "finished", {"executor": "[e](http://evil.example/exec) me@evil.example"})
            ids.append(run_id)
        split = store.start_run(names[0], "split", {}, 2)
        store.log_members([MemberRow(split, 0, 1, 0.0, "join", "[d](http://evil.example/device)", 0)])
        store.finish_run(split, "finished", None)
    with browsed(db, tmp_path, 1900) as (driver, address):
        pages = [f"{address}/", *(f"{address}/?run={run_id}" for run_id in [*ids, split])]
        for page in pages:
            driver.get(page)
            wait_for(lambda: "evil.example" in driver.page_source, 60, f"{page} to show the names")
            settled(driver, page)  # every element drawn
            hrefs = [a.get_attribute("href") or "" for a in driver.find_elements(By.CSS_SELECTOR, "a")]
            assert not [h for h in hrefs if not h.startswith(address)], (page, hrefs)
            assert not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')


def finished_quickstart(tmp_path: Path, settings: list[str]) -> tuple[Path, str, dict[str, Any], list[dict[str, Any]]]:
    """The quickstart run with ``--set`` each of ``settings``: its store, run id, summary and rounds' metrics."""
    import json

    from fedsim.cli import main

    db, out = tmp_path / "runs.db", tmp_path / "run"
    args = [part for setting in settings for part in ("--set", setting)]
    assert main(["run", str(REPO / "examples/quickstart.yaml"), *args, "--out", str(out), "--db", str(db)]) == 0
    with RunStore.open_readonly(db) as store:
        (run,) = store.list_runs()
        metrics = [json.loads(r.metrics_json) for r in store.rounds(run.run_id)]
    return db, run.run_id, json.loads((out / "summary.json").read_text()), metrics


def run_page_metrics(driver: Any, address: str, run_id: str, marker: str, charts: int) -> list[str]:
    """Open ``run_id``'s page once ``marker`` and ``charts`` charts are drawn, with no error on it; the texts
    of its metrics."""
    from selenium.webdriver.common.by import By

    driver.get(f"{address}/?run={run_id}")
    wait_for(lambda: marker in driver.page_source, 60, marker)
    wait_for(lambda: len(driver.find_elements(By.CSS_SELECTOR, ".js-plotly-plot")) >= charts, 60, "the charts")
    settled(driver, run_id)  # every chart drawn, ticks included
    assert not driver.find_elements(By.CSS_SELECTOR, '[data-testid="stException"]')
    return [m.text for m in driver.find_elements(By.CSS_SELECTOR, '[data-testid="stMetric"]')]


@pytest.mark.slow
def test_a_private_runs_page_shows_the_budget_curve_and_secaggs_bytes(chromium: None, tmp_path: Path) -> None:
    """A DP + SecAgg+ quickstart in a real browser: the privacy panel with epsilon spent and its curve on a
    right-hand axis beside accuracy, the SecAgg+ panel with its bytes per client, and no error on the page.
    ``FEDSIM_SCREENSHOTS=docs/img`` saves the page there (privacy.png)."""
    from dashboard.figures import human_bytes

    settings = [
        "rounds=6", "privacy.kind=central", "privacy.clip=1.0", "privacy.noise_multiplier=1.0",
        "privacy.delta=1e-5", "secagg.kind=secagg_plus", "secagg.num_shares=5", "secagg.reconstruction_threshold=3",
    ]  # fmt: skip
    db, run_id, summary, metrics = finished_quickstart(tmp_path, settings)
    last = metrics[-1]
    with browsed(db, tmp_path, 3200) as (driver, address):
        shown = run_page_metrics(driver, address, run_id, "Secure aggregation (SecAgg+)", 5)
        assert f"epsilon spent\n{summary['privacy']['epsilon']:.3f}" in shown, shown
        assert f"SecAgg+ bytes up per client\n{human_bytes(last['secagg_up_bytes'])}" in shown, shown
        assert "failed rounds\n0" in shown, shown
        figures = driver.execute_script(AXES)
        budget = [axes for axes in figures if any(a["title"] == "epsilon spent" for a in axes)]
        assert len(budget) == 1, figures
        axes = {a["title"]: a for a in budget[0]}
        assert set(axes) >= {"round", "test accuracy", "epsilon spent"}
        assert all(PLAIN_TICK.fullmatch(t) for t in axes["epsilon spent"]["ticks"]), axes
        assert any(a["title"] == "kB per client" for axes in figures for a in axes), figures
        driver.save_screenshot(str(Path(os.environ.get("FEDSIM_SCREENSHOTS", tmp_path)) / "privacy.png"))


@pytest.mark.slow
def test_an_attacked_runs_page_shows_the_attackers_and_the_backdoor_curve(chromium: None, tmp_path: Path) -> None:
    """A backdoored quickstart in a real browser: the Attacks panel with the attacker count and the backdoor's
    success as summary.json has them, its curve on a right-hand axis, and no error on the page."""
    settings = ["rounds=4", "eval_every=1", "attack.kind=backdoor", "attack.fraction=0.2", "attack.target=0"]
    db, run_id, summary, metrics = finished_quickstart(tmp_path, settings)
    turns = sum(len(m["attackers"]) for m in metrics)
    with browsed(db, tmp_path, 3200) as (driver, address):
        shown = run_page_metrics(driver, address, run_id, "attacking clients in round 4", 4)
        assert f"attacker turns\n{turns}" in shown, shown
        assert f"backdoor success\n{summary['attack']['backdoor_success']:.1%}" in shown, shown
        figures = driver.execute_script(AXES)
        panel = [axes for axes in figures if any(a["title"] == "attackers" for a in axes)]
        assert len(panel) == 1, figures
        titles = {a["title"] for a in panel[0]}
        assert titles >= {"round", "attackers", "share of test inputs"}, titles


@pytest.mark.slow
def test_an_asynchronous_runs_page_shows_the_virtual_clock(chromium: None, tmp_path: Path) -> None:
    """A FedBuff quickstart in a real browser: the Virtual clock panel with the clock and the updates applied as
    the run store has them, accuracy against virtual seconds, clients in flight with the staleness on a
    right-hand axis, and no error on the page."""
    settings = ["rounds=6", "eval_every=2", "clients_per_round=null", "asynchronous.kind=fedbuff", "clock.kind=trace",
                "asynchronous.concurrency=6", "asynchronous.buffer=3"]  # fmt: skip
    db, run_id, summary, metrics = finished_quickstart(tmp_path, settings)
    applied = sum(len(m["applied"]) for m in metrics)
    with browsed(db, tmp_path, 3200) as (driver, address):
        shown = run_page_metrics(driver, address, run_id, "Virtual clock", 4)
        assert f"virtual time\n{summary['clock']['clock_s']:,.1f} s" in shown, shown
        assert f"updates applied\n{applied}" in shown and applied == 18, shown
        figures = driver.execute_script(AXES)
        titles = [{a["title"] for a in axes} for axes in figures]
        assert {"virtual seconds", "test accuracy"} <= set().union(*[t for t in titles if "virtual seconds" in t])
        assert any(t >= {"virtual seconds", "clients in flight", "staleness (server steps)"} for t in titles), titles


def test_the_dashboard_starts_without_streamlits_websockets_warning(tmp_path: Path) -> None:
    """Streamlit warns at start when the installed websockets and uvicorn can abort its /_stcore/stream
    handshake; constraints.txt pins a websockets it accepts beside flwr's uvicorn (no browser needed)."""
    db, log = tmp_path / "runs.db", tmp_path / "dashboard.log"
    RunStore(db).close()
    with served(db, log):
        pass
    text = log.read_text()
    assert "fedsim dashboard on http://127.0.0.1:" in text
    assert "handshake" not in text and "Upgrade uvicorn" not in text, text
