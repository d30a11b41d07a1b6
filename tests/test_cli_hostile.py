"""Bad input to every command: one line naming the field, exit 2, and nothing written (no file, no run row)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from fedsim.cli import main
from fedsim.runstore import RunStore

ROOT = Path(__file__).resolve().parents[1]
QUICK = str(ROOT / "examples" / "quickstart.yaml")
SPLIT = str(ROOT / "examples" / "split_sst2.yaml")


DP = ["--set", "privacy.kind=central", "--set", "privacy.clip=1", "--set", "privacy.noise_multiplier=1"]
SECAGG = [
    part
    for s in ("kind=secagg_plus", "num_shares=5", "reconstruction_threshold=3")
    for part in ("--set", f"secagg.{s}")
]


def quick(*settings: str) -> list[str]:
    """``fedsim run`` on the quickstart with ``--set`` each of ``settings``."""
    return ["run", QUICK, *[part for setting in settings for part in ("--set", setting)]]


def _binary(tmp: Path) -> str:
    (tmp / "bin.yaml").write_bytes(b"\xff\xfe\x00binary")
    return "bin.yaml"


def _deep(tmp: Path) -> str:
    (tmp / "deep.yaml").write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    return "deep.yaml"


def _nested_sections(tmp: Path) -> str:
    (tmp / "nested.yaml").write_text(
        "name: x\n" + "".join(f"{' ' * 2 * k}k{k}:\n" for k in range(40)) + "  " * 40 + "v: 1\n"
    )
    return "nested.yaml"


def _laughs(tmp: Path) -> str:
    """A YAML "billion laughs": nine levels of nine aliases, 10**9 strings once expanded."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 9)}]" for k in range(1, 9)]
    (tmp / "laughs.yaml").write_text("\n".join(lines) + "\n")
    return "laughs.yaml"


LAUGHS_INLINE = (
    "[&a [1,1,1,1,1,1,1,1,1,1], "
    + ", ".join(f"&{b} [{', '.join([f'*{a}'] * 10)}]" for a, b in zip("abcd", "bcde", strict=True))
    + "]"
)


def _garbage_resume(tmp: Path) -> str:
    (tmp / "run").mkdir()
    (tmp / "run" / "config.json").write_text("{garbage")
    return "run"


def _file(tmp: Path) -> str:
    (tmp / "afile").write_text("x")
    return "afile"


def _dir(tmp: Path) -> str:
    (tmp / "adir").mkdir()
    return "adir"


def _not_a_db(tmp: Path) -> str:
    (tmp / "notdb.db").write_text("this is not sqlite")
    return "notdb.db"


def _grid_backdoor(tmp: Path) -> str:
    """A backdoor on 3x4 arrays: a 3x3 trigger would cover most of each one."""
    import numpy as np

    rng = np.random.default_rng(0)
    np.savez(tmp / "grid.npz", x=rng.normal(size=(200, 3, 4)).astype(np.float32), y=rng.integers(0, 2, 200))
    (tmp / "grid.yaml").write_text(
        "name: grid\nrounds: 1\nclients_per_round: 5\n"
        f"data: {{dataset: file, path: {tmp / 'grid.npz'}, clients: 10}}\nmodel: {{kind: logistic}}\n"
        "algorithm: {kind: fedavg, lr: 0.1}\nattack: {kind: backdoor, fraction: 0.2}\n"
    )
    return "grid.yaml"


def _sst2(tmp: Path) -> str:
    from tests.split_fixtures import write_sst2

    return str(write_sst2(tmp / "sst2"))


def _tokens(tmp: Path) -> str:
    (tmp / "tokens.txt").write_text("edge-0 token-of-edge-zero-0000\n")
    return "tokens.txt"


Case = tuple[Callable[[Path], str] | None, list[str], str]

CASES: dict[str, Case] = {
    # numbers: finite, and integers a run can store and seed with
    "lr inf": (None, ["run", QUICK, "--set", "algorithm.lr=.inf"], "algorithm.lr: Input should be a finite number"),
    "lr 1e400": (None, ["run", QUICK, "--set", "algorithm.lr=1e400"], "algorithm.lr: Input should be a finite"),
    "mu inf": (
        None,
        ["run", QUICK, "--set", "algorithm.kind=fedprox", "--set", "algorithm.mu=.inf"],
        "algorithm.mu: Input should be a finite number",
    ),
    "alpha inf": (None, ["run", QUICK, "--set", "data.partition.alpha=.inf"], "data.partition.alpha: Input should"),
    "split lr inf": (None, ["split", SPLIT, "--set", "train.lr=.inf"], "train.lr: Input should be a finite number"),
    "seed too large": (None, ["run", QUICK, "--set", "seed=4294967296"], "seed: must be at most 4294967295"),
    "rounds too large for sqlite": (None, ["run", QUICK, "--set", "rounds=1e30"], "rounds:"),
    "rounds int too large": (
        None,
        ["run", QUICK, "--set", f"rounds={2**64}"],
        "rounds: Input should be less than or equal",
    ),
    "optional sub-section's field named": (
        None,
        ["run", QUICK, "--set", "control.kind=none", "--set", "control.knob.start=-1"],
        "control.knob.start: Input should be greater than or equal to 0",
    ),
    # files that are not configs
    "binary config": (_binary, ["run", "{}"], "bin.yaml: not UTF-8 text"),
    "deeply nested yaml": (_deep, ["run", "{}"], "deep.yaml: nested too deeply"),
    "deeply nested mappings": (_nested_sections, ["run", "{}"], "nested.yaml: nested more than 32 levels"),
    "garbage config.json on resume": (_garbage_resume, ["resume", "{}"], "run/config.json: not the JSON config"),
    "yaml billion laughs": (_laughs, ["run", "{}"], "laughs.yaml: its YAML aliases expand to more than 100,000"),
    "billion laughs in --set": (
        None,
        ["run", QUICK, "--set", "seed=" + LAUGHS_INLINE],
        "--set seed: its YAML aliases expand",
    ),
    "betas with plain sgd": (
        None,
        ["run", QUICK, "--set", "algorithm.client_optimizer.betas=[0.8,0.9]"],
        "unknown key 'algorithm.client_optimizer.betas'; allowed here: kind, weight_decay, state, momentum, nesterov",
    ),
    "client optimizer state of plain sgd": (
        None,
        ["run", QUICK, "--set", "algorithm.client_optimizer.state=client"],
        "client_optimizer.state=client keeps SGD momentum or Adam moments per client; plain SGD has none",
    ),
    "factory without a colon": (
        None,
        ["run", QUICK, "--set", "data={dataset: python, factory: my_pkg.data.make, clients: 5}"],
        "data.factory: expected package.module:function (the module, a colon, the function) (got 'my_pkg.data.make')",
    ),
    # privacy that the accountant would not cover
    "dp beside skewscout": (
        None,
        ["run", QUICK, *DP, "--set", "control.kind=skewscout"],
        "privacy: control.kind=skewscout probes read clients' raw, unclipped models",
    ),
    "dp beside partial availability under poisson": (
        None,
        ["run", QUICK, *DP, "--set", "sampling=poisson", "--set", "emulation.availability=0.8"],
        "no longer the poisson sample of the population the accountant amplifies by; set emulation.availability=1",
    ),
    "dp beside partial availability, fixed cohorts": (
        None,
        ["run", QUICK, *DP, "--set", "emulation.availability=0.5"],
        "privacy: emulation.availability=0.5 lets a round find fewer reachable clients than it samples",
    ),
    "dp beside a secagg quantization too coarse for the clip": (
        None,
        ["run", QUICK, *DP, *SECAGG, "--set", "secagg.quantization_range=256", "--set", "secagg.modulus_range=65536"],
        "secagg.quantization_range=256: a dequantized update of this model's 6,186 values may exceed privacy.clip=1"
        " by up to 4.92 (4.92 clips), past its sensitivity; use quantization_range=1258419 or more",
    ),
    "more canaries than clients": (
        None,
        ["run", QUICK, *DP, "--set", "privacy.audit.canaries=100"],
        "privacy.audit.canaries=100 must be fewer than data.clients=100",
    ),
    # poisoned clients: settings that would do nothing, or the wrong thing, without a word (issue 46)
    "a scale attack at scale 1": (
        None,
        ["run", QUICK, "--set", "attack.kind=scale", "--set", "attack.fraction=0.2"],
        "kind=scale at scale=1 sends each malicious client's own update: a clean run; set attack.scale",
    ),
    "an attack fraction that rounds to no attacker": (
        None,
        ["run", QUICK, "--set", "attack.kind=sign_flip", "--set", "attack.fraction=0.004"],
        "attack.fraction=0.004 of data.clients=100 rounds to 0 malicious clients; use attack.fraction=0.01 or more",
    ),
    "a trimmed mean that trims nothing": (
        None,
        ["run", QUICK, "--set", "aggregator.kind=trimmed_mean", "--set", "aggregator.trim=0.01"],
        "aggregator.trim=0.01 drops floor(0.01 x 50) = 0 updates from each end of a round of 50 clients: the mean",
    ),
    "multi-Krum assuming no attacker": (
        None,
        ["run", QUICK, "--set", "aggregator.kind=multi_krum"],
        "kind=multi_krum with byzantine=0 averages all n - 0 updates: the mean; set aggregator.byzantine",
    ),
    "multi-Krum selecting the whole round": (
        None,
        ["run", QUICK, "--set", "aggregator.kind=multi_krum", "--set", "aggregator.selected=50"],
        "aggregator.kind=multi_krum averages all 50 updates of every round: the mean",
    ),
    "label flipping on a regression task": (
        None,
        quick("attack.kind=label_flip", "attack.fraction=0.2", "task.kind=regression"),
        "attack.kind=label_flip rewrites class labels: task.kind=regression has none",
    ),
    "a backdoor on a regression task": (
        None,
        quick("attack.kind=backdoor", "attack.fraction=0.2", "task.kind=regression"),
        "attack.kind=backdoor rewrites class labels: task.kind=regression has none",
    ),
    "a backdoor on inputs that are not images": (
        None,
        [
            "run",
            str(ROOT / "examples" / "synthetic_scaffold.yaml"),
            "--set",
            "attack.kind=backdoor",
            "--set",
            "attack.fraction=0.2",
        ],
        "attack.kind=backdoor stamps a 3x3 pixel trigger into images of height and width 6 or more; this dataset's"
        " inputs have shape (60,)",
    ),
    "a backdoor on 3x4 arrays": (
        _grid_backdoor,
        ["run", "{}"],
        "attack.kind=backdoor stamps a 3x3 pixel trigger into images of height and width 6 or more; this dataset's"
        " inputs have shape (3, 4)",
    ),
    "a trimmed mean that withstands fewer attackers than a round holds": (
        None,
        quick("attack.kind=sign_flip", "attack.fraction=0.3", "aggregator.kind=trimmed_mean", "aggregator.trim=0.2"),
        "attack.fraction=0.3 puts 15 attackers in an average round of 50 clients; aggregator.kind=trimmed_mean"
        " withstands 10 (aggregator.trim=0.2 drops that many from each end; raise it)",
    ),
    "multi-Krum assuming fewer attackers than a round holds": (
        None,
        quick("attack.kind=ipm", "attack.fraction=0.2", "aggregator.kind=multi_krum", "aggregator.byzantine=5"),
        "attack.fraction=0.2 puts 10 attackers in an average round of 50 clients; aggregator.kind=multi_krum"
        " withstands 5 (aggregator.byzantine=5; raise it)",
    ),
    "a median beside half the round attacking": (
        None,
        quick("attack.kind=sign_flip", "attack.fraction=0.49", "aggregator.kind=median"),
        "attack.fraction=0.49 puts 24.5 attackers in an average round of 50 clients; aggregator.kind=median"
        " withstands 24 (fewer than half of a round)",
    ),
    **{
        f"{rule} beside a malicious majority": (
            None,
            quick("attack.kind=sign_flip", "attack.fraction=0.9", f"aggregator.kind={rule}"),
            f"attack.fraction=0.9: aggregator.kind={rule} assumes a minority of attackers",
        )
        for rule in ("trimmed_mean", "geometric_median", "centered_clip")
    },
    "rounds beyond any run": (None, ["run", QUICK, "--set", "rounds=1.0e+12"], "rounds: Input should be less than or"),
    # output paths
    "out is a file": (_file, ["run", QUICK, "--out", "{}"], "--out afile: exists and is not a directory"),
    "state dir is a file": (
        _file,
        ["run", QUICK, "--set", "state.backend=disk", "--set", "state.dir={}"],
        "state.dir afile: exists and is not a directory",
    ),
    "db is a directory": (_dir, ["run", QUICK, "--db", "{}"], "--db adir: is a directory"),
    "db is not a database": (_not_a_db, ["run", QUICK, "--db", "{}"], "--db notdb.db: not a run store"),
    "split out is a file": (_file, ["split", SPLIT, "--out", "{}"], "--out afile: exists and is not a directory"),
    "run name escapes the output root": (None, ["run", QUICK, "--set", "name=../../escape"], "name: a run name is"),
    "run name with a control character": (None, ["run", QUICK, "--set", 'name="a\\u0000b"'], "name: a run name is"),
    "split name escapes": (None, ["split", SPLIT, "--set", "name=../x"], "name: a run name is"),
    # split models and codecs
    "split layer out of range": (
        _sst2,
        ["split", SPLIT, "--set", "data.dir={}", "--set", "model.split_layer=99"],
        "model.split_layer=99 is outside 0..6",
    ),
    "split model path missing": (
        _sst2,
        ["split", SPLIT, "--set", "data.dir={}", "--set", "model.path=/nonexistent"],
        "model.path /nonexistent: no config.json",
    ),
    "split data missing": (
        None,
        ["split", SPLIT, "--set", "data.dir=nowhere"],
        "data.dir: nowhere/train.tsv not found",
    ),
    "codec rank with underscore": (None, ["split", SPLIT, "--set", "codec=lowrank:1_0"], "codec 'lowrank:1_0'"),
    "codec rank in full-width digits": (None, ["split", SPLIT, "--set", "codec=lowrank:３２"], "expected 1 rank(s)"),
    "split clients beyond the sentences": (
        _sst2,
        ["split", SPLIT, "--set", "data.dir={}", "--set", "data.clients=1000"],
        "data.clients=1000 exceeds the 40 training sentences",
    ),
    "adapter wider than the model": (
        _sst2,
        ["split", SPLIT, "--set", "data.dir={}", "--set", "adapter.r=100000"],
        "adapter.r=100000 is wider than the model (hidden size 384): at most 384",
    ),
    "serve port out of range": (
        _tokens,
        ["serve", SPLIT, "--set", "server.tokens={}", "--set", "server.address=localhost:99999"],
        "server.address: expected HOST:PORT with a port in 0..65535",
    ),
    "serve address without a port": (
        _tokens,
        ["serve", SPLIT, "--set", "server.tokens={}", "--set", "server.address=localhost"],
        "server.address: expected HOST:PORT",
    ),
    # issue 49's small things: one prefix, a suggestion, --unset of a key the file does not hold
    "a section's own message keeps one prefix": (
        None,
        quick("privacy.kind=central", "privacy.clip=1"),
        "error: privacy: give exactly one of noise_multiplier and target_epsilon",
    ),
    "a noise cohort above the population suggests privacy.population": (
        None,
        [*quick(), *DP, "--set", "privacy.noise_cohort=1000"],
        "privacy.noise_cohort=1000 exceeds the population (data.clients=100): a deployment that samples 1000"
        " clients a round has more; say how many with privacy.population=1000 or more",
    ),
    "a delta above one client's share of the population": (
        None,
        [*quick(), *DP, "--set", "privacy.delta=0.05"],
        "privacy.delta=0.05 is above 1/population (data.clients=100: 1/100 = 0.01); the rule of thumb is delta"
        " well below 1/population, e.g. 0.001",
    ),
    "a deployment smaller than the clients that train": (
        None,
        [*quick(), *DP, "--set", "privacy.population=50"],
        "privacy.population=50 is below data.clients=100: the deployment the accountant speaks of has at least",
    ),
    "a budget below one round's epsilon, refused before anything is written": (
        None,
        [*quick(), *DP, "--set", "privacy.max_epsilon=0.01"],
        "privacy.max_epsilon=0.01 is below one round's epsilon (this run's ",
    ),
    "unset of a key the file does not hold": (
        None,
        ["run", QUICK, "--unset", "algorithm.momentum"],
        "--unset algorithm.momentum: the config has no 'momentum' at algorithm (it holds",
    ),
    "tracking twice": (None, quick("tracking=[csv,csv]"), "tracking names csv twice"),
    "tracking into a file": (
        _file,
        quick("tracking={backends: [csv], dir: {}}"),
        "tracking.dir afile: exists and is not a directory",
    ),
    "serve adapter wider than the model": (
        _tokens,
        ["serve", SPLIT, "--set", "server.tokens={}", "--set", "adapter.r=100000"],
        "adapter.r=100000 is wider than the model (hidden size 384)",
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    prepare, argv, expected = CASES[name]
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "runs.db"
    RunStore(db).close()  # an existing store: a refused command adds no run to it
    value = prepare(tmp_path) if prepare is not None else ""
    argv = [a.replace("{}", value) for a in argv]
    if "--db" not in argv:
        argv += ["--db", str(db)]
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2, err
    assert err.count("\n") == 1 and err.startswith("fedsim: error: "), err
    assert expected in err, err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # no file, no directory
    with sqlite3.connect(db) as raw:
        assert raw.execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)


def test_a_round_that_loses_every_client_keeps_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            *("run", QUICK, "--set", "rounds=3", "--set", "clients_per_round=2", "--set", "emulation.dropout=0.99"),
            *("--set", "emulation.availability=0.01", "--out", str(tmp_path / "out"), "--db", str(tmp_path / "db")),
        ]
    )
    assert code == 0 and "3 rounds" in capsys.readouterr().out


def test_a_damaged_run_store_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "runs.db"
    RunStore(db).close()
    raw = bytearray(db.read_bytes())
    raw[100:4096] = b"\xa5" * (4096 - 100)  # the header says SQLite; the schema page is garbage
    db.write_bytes(bytes(raw))
    with pytest.raises(SystemExit) as exit_:
        main(["run", QUICK, "--set", "rounds=1", "--out", str(tmp_path / "out"), "--db", str(db)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1, err
    assert f"{db}" in err and not (tmp_path / "out").exists()


def test_serve_on_an_address_it_cannot_bind_is_one_line_without_grpcs_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tokens.txt").write_text("edge-0 token-of-edge-zero-0000\n")
    argv = ["serve", SPLIT, "--set", "server.address=999.1.1.1:80", "--set", "server.tokens=tokens.txt"]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--out", "cloud", "--db", "runs.db"])
    err = capfd.readouterr().err  # file descriptor 2: gRPC's C core logs there, not to sys.stderr
    assert exit_.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith("fedsim: error: server.address 999.1.1.1:80: cannot listen")
    assert not (tmp_path / "cloud").exists() and not (tmp_path / "runs.db").exists()


def test_serve_on_a_taken_address_records_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    import socket

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tokens.txt").write_text("edge-0 token-of-edge-zero-0000\n")
    db = tmp_path / "runs.db"
    RunStore(db).close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        argv = ["serve", SPLIT, "--set", f"server.address={address}", "--set", "server.tokens=tokens.txt"]
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--out", "cloud", "--db", str(db)])
    err = capfd.readouterr().err  # file descriptor 2: gRPC's C core logs there, not to sys.stderr
    assert exit_.value.code == 2 and err.count("\n") == 1 and f"server.address {address}: cannot listen" in err
    assert not (tmp_path / "cloud").exists()
    with sqlite3.connect(db) as raw:
        assert raw.execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)


def test_resume_with_nothing_to_resume_records_no_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from fedsim.config import load_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps(load_config(QUICK).model_dump(mode="json")))
    db = tmp_path / "runs.db"
    RunStore(db).close()
    with pytest.raises(SystemExit) as exit_:
        main(["resume", "run", "--db", str(db)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "no complete checkpoint" in err and err.count("\n") == 1
    with sqlite3.connect(db) as raw:
        assert raw.execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)


def test_an_unreadable_config_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "secret.yaml"
    config.write_text("name: x\n")
    read_text = Path.read_text

    def denied(self: Path, *args: object, **kwargs: object) -> str:
        if self == config:  # chmod 000 as a user: root, who runs CI here, reads any file
            raise PermissionError(13, "Permission denied", str(self))
        return read_text(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", denied)
    with pytest.raises(SystemExit) as exit_:
        main(["run", str(config), "--out", str(tmp_path / "out"), "--db", str(tmp_path / "runs.db")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1, err
    assert f"{config}: cannot read the config (Permission denied)" in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs.db").exists()


def test_resume_without_a_checkpoint_creates_no_run_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from fedsim.config import load_config

    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps(load_config(QUICK).model_dump(mode="json")))
    with pytest.raises(SystemExit) as exit_:
        main(["resume", "run", "--db", "fresh.db"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "no complete checkpoint in run/checkpoints" in err and err.count("\n") == 1
    assert not (tmp_path / "fresh.db").exists()


def test_a_run_expecting_no_client_a_round_warns_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", QUICK, "--set", "rounds=2", "--set", "emulation.availability=1e-9", "--set", "progress=false"]
    assert main([*argv, "--out", str(tmp_path / "out"), "--db", str(tmp_path / "runs.db")]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "emulation.availability=1e-09 of 100 clients" in err and "trains 1e-07 clients a round on average" in err


def test_a_run_that_cannot_end_within_a_day_warns_after_its_first_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedsim import Simulation

    tree = {"name": "long", "rounds": 10_000_000, "clients_per_round": 10, "eval_every": 0, "progress": False}
    tree["data"] = {"dataset": "digits", "clients": 10}
    tree["algorithm"] = {"kind": "fedavg", "local_epochs": 4}  # 9 ms a round or more: over a day for 10M
    sim = Simulation(tree, out=tmp_path / "out", db=tmp_path / "runs.db", callbacks=[lambda s, r: r.round >= 2])
    sim.run()
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "rounds left (rounds=10,000,000) take" in err and "days; Ctrl-C stops the run, resumable" in err


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"LOCAL_WORLD_SIZE": "0"}, "environment variable LOCAL_WORLD_SIZE='0': must be a whole number >= 1"),
        ({"LOCAL_WORLD_SIZE": ""}, "environment variable LOCAL_WORLD_SIZE='': must be a whole number >= 1"),
        ({"RANK": "first"}, "environment variable RANK='first': must be a whole number >= 0"),
        ({"LOCAL_RANK": "-1"}, "environment variable LOCAL_RANK='-1': must be a whole number >= 0"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "variables RANK=2, WORLD_SIZE=2: a rank must be below its world"),
    ],
)
def test_a_bad_torchrun_variable_is_one_line_exit_2_and_keeps_the_last_run(
    env: dict[str, str],
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out, db = tmp_path / "out", tmp_path / "runs.db"
    argv = ["run", QUICK, "--set", "rounds=1", "--out", str(out), "--db", str(db)]
    assert main(argv) == 0
    summary = (out / "summary.json").read_bytes()
    capsys.readouterr()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--overwrite"])  # refused before --overwrite clears anything
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and expected in err, err
    assert (out / "summary.json").read_bytes() == summary
    with sqlite3.connect(db) as raw:
        assert raw.execute("SELECT COUNT(*) FROM runs").fetchone() == (1,)


def test_a_rule_that_some_rounds_will_overwhelm_is_one_warning_with_the_share(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """40 of the 100 quickstart clients attack; a round samples 50 without replacement, so its attackers are
    hypergeometric: the share of rounds with 25 or more (more than the median's 24), from scipy's distribution
    (a second library; fedsim computes it from log-binomials), is said once on stderr and the run goes on."""
    from scipy.stats import hypergeom

    share = float(hypergeom.sf(24, 100, 40, 50))
    code = main(
        [
            *("run", QUICK, "--set", "rounds=1", "--set", "attack.kind=sign_flip", "--set", "attack.fraction=0.4"),
            *("--set", "aggregator.kind=median", "--out", str(tmp_path / "out"), "--db", str(tmp_path / "db")),
        ]
    )
    err = capsys.readouterr().err
    assert code == 0 and 0.01 < share < 0.99
    expected = (
        f"fedsim: warning: attack.fraction=0.4 of 100 clients: {share:.0%} of rounds of 50 will hold more than the 24"
        " attackers aggregator.kind=median withstands (20 in an average round)"
    )
    assert err.count(expected) == 1, err
