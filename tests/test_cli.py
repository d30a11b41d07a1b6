"""The fedsim command: bad input gives one line naming the field, exit status 2, and no files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fedsim import __version__
from fedsim.cli import main
from fedsim.config import ConfigError

GOOD = """\
name: tiny
rounds: 2
clients_per_round: 5
progress: false
data: {dataset: digits, clients: 10, partition: {kind: dirichlet, alpha: 0.5}}
model: {kind: logistic}
algorithm: {kind: fedavg, lr: 0.1, batch_size: 16}
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return path


def _run_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("fedsim: error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("text", "sets", "expected"),
    [
        (
            GOOD.replace("rounds: 2", "roundz: 2"),
            [],
            "unknown key 'roundz'; allowed here: name, seed, rounds",
        ),
        (GOOD, ["algorithm.momentum=0.9"], "unknown key 'algorithm.momentum'; allowed here: lr,"),
        (GOOD, ["rounds=many"], "rounds: Input should be a valid integer"),
        (GOOD, ["algorithm.lr=-0.5"], "algorithm.lr: Input should be greater than 0 (got -0.5)"),
        (GOOD, ["data.partition.alpha=0"], "data.partition.alpha: Input should be greater than 0"),
        (GOOD, ["model.norm=layer"], "model.norm: Input should be 'group', 'batch' or 'none'"),
        (GOOD, ["clients_per_round=50"], "clients_per_round=50 exceeds data.clients=10"),
        (GOOD, ["algorithm.kind=fedsgd"], "algorithm: Input tag 'fedsgd'"),
        (GOOD, ["data.dataset=file", "data.path=/nonexistent/x.npz"], "data.path: data file not found"),
        (GOOD, ["rounds"], "--set 'rounds': expected key=value"),
        (
            GOOD,
            ["devices=2", "algorithm.kind=scaffold", "checkpoint.every=1"],
            "checkpoint.every=1 with more than one rank and a stateful algorithm needs state.backend=disk",
        ),
        ("rounds: [1,\n", [], "invalid YAML at line"),
        ("- 1\n- 2\n", [], "expected a mapping of settings"),
    ],
)
def test_bad_config_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, sets: list[str], expected: str
) -> None:
    cfg = _write(tmp_path, text)
    argv = ["run", str(cfg), "--out", str(tmp_path / "out"), "--db", str(tmp_path / "runs.db")]
    for s in sets:
        argv += ["--set", s]
    line = _run_fail(tmp_path, capsys, argv)
    assert expected in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.yaml"]


def test_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _run_fail(tmp_path, capsys, ["run", str(tmp_path / "nope.yaml")])
    assert "config file not found" in line and "nope.yaml" in line


def test_unknown_subcommand_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = _run_fail(tmp_path, capsys, ["fly"])
    assert "invalid choice: 'fly'" in line


def test_run_writes_summary_and_runs_lists_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = _write(tmp_path, GOOD)
    db = tmp_path / "runs.db"
    assert main(["run", str(cfg), "--out", str(tmp_path / "out"), "--db", str(db)]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    expected = {"run_id", "rounds", "clients", "final_accuracy", "final_loss", "wall_s", "train_s"}
    expected |= {"samples", "samples_per_s", "bytes_up", "bytes_down", "peak_rss_mb"}
    assert expected <= set(summary)
    assert summary["rounds"] == 2 and summary["clients"] == 10
    assert (summary["algorithm"], summary["dataset"]) == ("fedavg", "digits") and summary["threads"] >= 1
    assert summary["version"] == __version__ and summary["best_accuracy"] >= summary["final_accuracy"]
    assert not {"bytes_probe", "probe_s", "local_steps"} & set(summary)  # no SkewScout fields without it
    assert 0.0 <= summary["final_accuracy"] <= 1.0
    # logistic regression on 8x8 digits: 650 parameters, 5 clients a round, 2 rounds, float32
    assert summary["bytes_down"] == 2 * 5 * 650 * 4
    capsys.readouterr()
    assert main(["runs", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert summary["run_id"] in out and "finished" in out


def test_console_script_exit_code(tmp_path: Path) -> None:
    cfg = _write(tmp_path, GOOD)
    proc = subprocess.run(
        [sys.executable, "-m", "fedsim.cli", "run", str(cfg), "--set", "rounds=0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "fedsim: error: rounds: Input should be greater than or equal to 1 (got 0)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.yaml"]


SPLIT = Path(__file__).resolve().parents[1] / "examples" / "split_sst2.yaml"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["split", str(SPLIT), "--set", "codec=zstd"], "codec: "),
        (["split", str(SPLIT), "--set", "codec=lowrank:0"], "expected 1 rank(s)"),
        (["split", str(SPLIT), "--set", "adapter.mode=qlora"], "adapter.mode"),
        (["serve", str(SPLIT), "--set", "server.tokens=nowhere.txt"], "server.tokens: nowhere.txt: file not found"),
        (["serve", str(SPLIT), "--set", "server.cert=c.pem"], "server.cert and server.key go together"),
        (["edge", "run", str(SPLIT), "--device", "d", "--token-file", "nowhere"], "nowhere: token file not found"),
        (["edge", "run", str(SPLIT), "--device", "d", "--token-file", "{tok}"], "exactly one of --client K"),
        (["edge", "run", str(SPLIT), "--device", "d", "--token-file", "{tok}", "--client", "9"], "clients 0..3"),
        (["edge", "run", str(SPLIT), "--device", "d", "--token-file", "{tok}", "--steps", "0"], "--steps must be"),
        (["edge", "frobnicate", str(SPLIT)], "invalid choice"),
        (["dashboard", "--port", "70000"], "--port must be in 1..65535"),
    ],
)
def test_split_commands_refuse_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    token = tmp_path / "token"
    token.write_text("a-device-token-0123456789\n")
    line = _run_fail(tmp_path, capsys, [a.replace("{tok}", str(token)) for a in argv])
    assert message in line
    assert list(tmp_path.iterdir()) == [token]


def test_version_and_a_listing_piped_into_head(tmp_path: Path) -> None:
    from fedsim.runstore import RunStore

    done = subprocess.run([sys.executable, "-m", "fedsim.cli", "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == f"fedsim {__version__}"
    db = tmp_path / "runs.db"
    with RunStore(db) as store:  # far more than a pipe holds, so the writer meets the closed pipe
        for k in range(3000):
            store.finish_run(store.start_run(f"run{k}", "simulation", {}, 1), "finished", None)
    listing = subprocess.Popen(
        [sys.executable, "-m", "fedsim.cli", "runs", "--db", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert listing.stdout is not None and listing.stdout.readline().startswith(b"started")
    listing.stdout.close()  # what `| head -1` does
    assert listing.wait(timeout=60) == 0
    assert listing.stderr is not None and listing.stderr.read() == b""


def test_a_finished_run_is_never_overwritten_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg, db = _write(tmp_path, GOOD), str(tmp_path / "runs.db")
    out = tmp_path / "out"
    assert main(["run", str(cfg), "--out", str(out), "--db", db]) == 0
    first = (out / "summary.json").read_text()
    with pytest.raises(SystemExit) as exit_:
        main(["run", str(cfg), "--out", str(out), "--db", db])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "pass --overwrite to replace it" in err
    assert (out / "summary.json").read_text() == first  # untouched
    (out / "notes.txt").write_text("mine")  # not fedsim's: --overwrite leaves it
    assert main(["run", str(cfg), "--out", str(out), "--db", db, "--overwrite"]) == 0
    assert (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "summary.json").read_text())["run_id"] != json.loads(first)["run_id"]
    monkeypatch.chdir(tmp_path)  # without --out every run gets a folder of its own
    for _ in range(2):
        assert main(["run", str(cfg), "--db", db]) == 0
    assert (tmp_path / "out" / "tiny" / "summary.json").is_file()
    assert (tmp_path / "out" / "tiny-2" / "summary.json").is_file()


@pytest.mark.parametrize(
    ("every", "why"),
    [
        (0, "checkpoint.every=0 checkpoints only a run stopped between rounds by Ctrl-C or SIGTERM"),
        (2, "it stopped before its first checkpoint, after round 2 (checkpoint.every=2)"),
        ("auto", "it stopped before its first automatic checkpoint, after its second round, or its setup takes none"),
    ],
)
def test_a_run_that_died_before_any_checkpoint_is_not_offered_a_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], every: int | str, why: str
) -> None:
    from fedsim import Simulation

    def dies(sim: object, result: object) -> None:  # as a crash would, after the first round
        raise RuntimeError("the machine went away")

    tree, out, db = yaml.safe_load(GOOD) | {"checkpoint": {"every": every}}, tmp_path / "out", tmp_path / "runs.db"
    with pytest.raises(RuntimeError, match="the machine went away"):
        Simulation(tree, out=out, db=db, callbacks=[dies]).run()
    assert (out / "config.json").is_file() and not (out / "summary.json").exists()
    for argv in (["run", str(_write(tmp_path, GOOD)), "--out", str(out)], ["resume", str(out)]):
        line = _run_fail(tmp_path, capsys, [*argv, "--db", str(db)])
        assert why in line and "nothing to resume" in line and "fedsim resume" not in line, line


@pytest.mark.slow
def test_a_run_is_named_by_what_its_overrides_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, db = _write(tmp_path, GOOD), str(tmp_path / "runs.db")
    monkeypatch.chdir(tmp_path)
    assert main(["run", str(cfg), "--db", db, "--set", "algorithm.lr=0.05", "--set", "rounds=1"]) == 0
    assert main(["run", str(cfg), "--db", db, "--set", "rounds=1", "--set", "threads=1", "--devices", "2"]) == 0
    assert main(["run", str(cfg), "--db", db, "--set", "rounds=1", "--set", "name=mine"]) == 0
    summaries = {p.parent.name: json.loads(p.read_text()) for p in (tmp_path / "out").glob("*/summary.json")}
    assert sorted(summaries) == ["mine", "tiny-lr0.05-rounds1", "tiny-rounds1"]  # threads and devices: no part
    assert summaries["tiny-lr0.05-rounds1"]["run_id"].startswith("tiny-lr0.05-rounds1-")
    listed = subprocess.run(
        [sys.executable, "-m", "fedsim.cli", "runs", "--db", db], capture_output=True, text=True, check=True
    ).stdout
    assert all(name in listed for name in ("tiny-lr0.05-rounds1", "tiny-rounds1", "mine"))


def test_an_override_name_is_a_valid_run_name_whatever_the_value() -> None:
    from fedsim.config import named_by_overrides

    assert (
        named_by_overrides("q", ["data.dir=../shared/data/sst2", "codec=lowrank-int8:32"]) == "q-codeclowrank-int8_32"
    )
    # where files live, how often it evaluates, what tracks it: none changes what the run is
    where = ["data.dataset=mnist", "data.dir=/x/mnist", "eval_every=20", "tracking=[csv]", "clock.trace.path=t.npz"]
    assert named_by_overrides("q", where) == "q-datasetmnist"
    assert named_by_overrides("q", ["server.address=0.0.0.0:1", "state.dir=/x", "progress=false"]) == "q"
    assert len(named_by_overrides("q" * 90, ["algorithm.lr=0.123456789"])) == 100
    # two keys ending alike keep the dotted part that tells them apart, the others their last part
    assert named_by_overrides("q", ["uplink.kind=ef_sign", "downlink.kind=qsgd", "uplink.levels=16"]) == (
        "q-uplink.kindef_sign-downlink.kindqsgd-levels16"
    )
    assert named_by_overrides("q", ["a.b.kind=1", "c.b.kind=2"]) == "q-a.b.kind1-c.b.kind2"


def test_unset_removes_a_key_the_new_kind_does_not_take(tmp_path: Path) -> None:
    """examples/decentralised.yaml's DecentLaM has ``momentum``; as dsgd (no momentum) the key must go."""
    from fedsim.config import load_config

    example = Path(__file__).resolve().parents[1] / "examples" / "decentralised.yaml"
    with pytest.raises(ConfigError, match=r"unknown key 'algorithm\.momentum'"):
        load_config(example, ["algorithm.kind=dpsgd"])
    cfg = load_config(example, ["algorithm.kind=dpsgd"], ["algorithm.momentum"])
    assert cfg.algorithm.kind == "dpsgd" and "momentum" not in type(cfg.algorithm).model_fields


@pytest.mark.slow
def test_a_piped_run_prints_a_line_per_evaluation(tmp_path: Path) -> None:
    cfg = _write(tmp_path, GOOD.replace("progress: false", "progress: true\neval_every: 1"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedsim.cli",
            "run",
            str(cfg),
            "--out",
            str(tmp_path / "o"),
            "--db",
            str(tmp_path / "d"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("threads: 1 per rank (a small model") and "`threads: N` chooses" in lines[0]
    lines = lines[1:]
    assert [line.split(":")[0] for line in lines[:2]] == ["round 1/2", "round 2/2"]
    assert "accuracy" in lines[0] and "samples/s" in lines[0] and "━" not in done.stdout  # no bar in a pipe


@pytest.mark.slow
def test_the_progress_line_adds_epsilon_bytes_and_the_backdoors_success(tmp_path: Path) -> None:
    private = "privacy: {kind: central, clip: 1.0, noise_multiplier: 1.0}\n"
    attacked = "attack: {kind: backdoor, fraction: 0.2, scale: 3.0}\n"
    cfg = _write(tmp_path, GOOD.replace("progress: false", "progress: true\neval_every: 1") + private + attacked)
    argv = ["run", str(cfg), "--out", str(tmp_path / "o"), "--db", str(tmp_path / "d")]
    done = subprocess.run([sys.executable, "-m", "fedsim.cli", *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    last = next(line for line in done.stdout.splitlines() if line.startswith("round 2/2"))
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert f"epsilon {summary['privacy']['epsilon']:.3g}, " in last
    assert f"{summary['bytes_up'] / 1e3:,.1f} kB up, " in last  # 2 rounds of 5 logistic models: kB, not MB
    assert f"backdoor {summary['attack']['backdoor_success']:.3g}, " in last


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_marks_the_run_interrupted_with_one_line(tmp_path: Path, sig: str) -> None:
    import signal
    import time

    from fedsim.runstore import RunStore

    long = GOOD.replace("rounds: 2", "rounds: 100000").replace(
        "progress: false", "progress: false\ncheckpoint: {every: 1}"
    )
    cfg, out, db = _write(tmp_path, long), tmp_path / "out", tmp_path / "runs.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fedsim.cli", "run", str(cfg), "--out", str(out), "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not list((out / "checkpoints").glob("ckpt-*")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
        time.sleep(0.05)
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "interrupted after round" in err and "newest checkpoint" in err and f"fedsim resume {out}" in err
    with RunStore.open_readonly(db) as store:
        (run,) = store.list_runs()
    assert run.status == "interrupted"


def _reject_constant(name: str) -> float:
    raise ValueError(f"summary.json holds {name}: not strict JSON")


def test_regression_from_a_file_trains_reports_final_mse_and_writes_strict_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import numpy as np

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 5)).astype(np.float32)
    np.savez("reg.npz", x=x, y=(x @ rng.normal(size=5) + 0.1 * rng.normal(size=400)).astype(np.float32))
    config = {
        "name": "reg",
        "rounds": 4,
        "progress": False,
        "data": {"dataset": "file", "path": "reg.npz", "clients": 8},
        "task": {"kind": "regression"},
        "model": {"kind": "mlp"},
        "algorithm": {"kind": "fedavg", "lr": 0.05},
    }
    Path("reg.yaml").write_text(yaml.safe_dump(config))
    assert main(["run", "reg.yaml", "--db", "runs.db"]) == 0
    assert "final_mse=" in capsys.readouterr().out
    summary = json.loads(Path("out/reg/summary.json").read_text(), parse_constant=_reject_constant)
    assert summary["task"] == "regression" and summary["dataset"] == "file"
    assert 0 < summary["final_mse"] < float(np.var(np.load("reg.npz")["y"]))  # better than predicting the mean
    assert summary["final_accuracy"] is None and summary["best_accuracy"] is None
    assert main(["runs", "--db", "runs.db"]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    columns = ["started", "kind", "status", "rounds", "task", "final", "epsilon", "deployed", "audit", "MB", "up"]
    assert header.split()[:11] == columns
    assert row.split()[8:12] == ["-", "-", "-", f"{summary['bytes_up'] / 1e6:,.2f}"]  # not private: no epsilon
    assert "regression" in row and f"mse {summary['final_mse']:.4g}" in row and row.endswith(summary["run_id"])
