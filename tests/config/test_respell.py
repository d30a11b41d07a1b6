"""Old spellings load as today's with one note: ``algorithm.name`` is ``algorithm.kind``, as in every section."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from fedsim.config import ConfigError, SpellingNote, load_config, local_training, parse_config
from tests.conftest import QUICKSTART, tiny_config


def test_algorithm_name_loads_as_kind_with_a_note() -> None:
    old = tiny_config(algorithm={"name": "fedprox", "mu": 0.1, "lr": 0.2})
    with pytest.warns(SpellingNote, match=r"^algorithm\.name=fedprox is spelled algorithm\.kind now$"):
        cfg = parse_config(old)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # today's spelling: no note
        assert parse_config(tiny_config(algorithm={"kind": "fedprox", "mu": 0.1, "lr": 0.2})) == cfg
    assert cfg.algorithm.kind == "fedprox" and cfg.model_dump(mode="json")["algorithm"]["kind"] == "fedprox"
    assert "name" not in cfg.model_dump(mode="json")["algorithm"]  # config.json is written in today's spelling


def test_name_and_kind_together_in_a_file_is_one_error() -> None:
    with pytest.raises(ConfigError, match=r"algorithm\.name and algorithm\.kind are one setting"):
        parse_config(tiny_config(algorithm={"name": "fedprox", "kind": "fedavg"}))


def test_an_old_override_wins_over_the_files_kind() -> None:
    with pytest.warns(SpellingNote, match=r"algorithm\.name=scaffold is spelled algorithm\.kind now"):
        cfg = load_config(QUICKSTART, ["algorithm.name=scaffold"])
    assert cfg.algorithm.kind == "scaffold"


def test_fedsim_run_of_an_old_file_prints_one_note_and_runs(tmp_path: Path) -> None:
    tree = tiny_config(rounds=1, algorithm={"name": "fedavg", "lr": 0.1})
    config = tmp_path / "old.yaml"
    config.write_text(json.dumps(tree))  # JSON is YAML
    out, db = str(tmp_path / "out"), str(tmp_path / "runs.db")
    done = subprocess.run(
        [sys.executable, "-m", "fedsim.cli", "run", str(config), "--out", out, "--db", db],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    notes = [line for line in done.stderr.splitlines() if "note:" in line]
    assert notes == ["fedsim: note: algorithm.name=fedavg is spelled algorithm.kind now"]
    saved = json.loads((tmp_path / "out" / "config.json").read_text())
    assert saved["algorithm"]["kind"] == "fedavg" and "name" not in saved["algorithm"] and saved["format"] == 2


OLD_AND_NEW = [
    ({"aggregator": {"kind": "mean"}}, {"aggregator": {"kind": "none"}}, "aggregator.kind=mean is spelled"),
    ({"control": {"kind": "fixed"}}, {"control": {"kind": "none"}}, "control.kind=fixed is spelled"),
    ({"asynchronous": {"mode": "off"}}, {"asynchronous": {"kind": "none"}}, "asynchronous.mode=off is spelled"),
    ({"secagg": {"num_shares": 0}}, {"secagg": {"kind": "none"}}, "secagg.num_shares=0 is spelled"),
    ({"federated_eval": {"holdout": 0.0}}, {"federated_eval": {"kind": "none"}}, "federated_eval.holdout=0"),
    (
        {"secagg": {"num_shares": 5, "reconstruction_threshold": 3}},
        {"secagg": {"kind": "secagg_plus", "num_shares": 5, "reconstruction_threshold": 3}},
        "secagg.num_shares=5 is spelled secagg.kind=secagg_plus",
    ),
    (
        {"federated_eval": {"holdout": 0.2}},
        {"federated_eval": {"kind": "holdout", "holdout": 0.2}},
        "federated_eval.holdout=0.2 is spelled federated_eval.kind=holdout",
    ),
    (
        {"asynchronous": {"mode": "fedbuff", "concurrency": 4}, "clients_per_round": None},
        {"asynchronous": {"kind": "fedbuff", "concurrency": 4}, "clients_per_round": None, "clock": {"kind": "trace"}},
        "asynchronous.mode=fedbuff is spelled asynchronous.kind",
    ),
    (  # the trace, once the asynchronous server's, is every run's clock's
        {
            "asynchronous": {
                "kind": "fedasync",
                "concurrency": 4,
                "trace": {"synthetic": {"clients": 50}},
                "target_accuracy": 0.5,
            },
            "clients_per_round": None,
        },
        {
            "asynchronous": {"kind": "fedasync", "concurrency": 4},
            "clients_per_round": None,
            "clock": {"kind": "trace", "trace": {"synthetic": {"clients": 50}}, "target_accuracy": 0.5},
        },
        "asynchronous.trace is spelled clock.trace now; asynchronous.target_accuracy is spelled clock.target_accuracy",
    ),
]


@pytest.mark.parametrize(("old", "new", "note"), OLD_AND_NEW)
def test_every_old_off_loads_as_kind_none_and_every_on_by_a_number_as_its_kind(
    old: dict[str, object], new: dict[str, object], note: str
) -> None:
    with pytest.warns(SpellingNote, match=re.escape(note)):
        then = parse_config(tiny_config(**old))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        now = parse_config(tiny_config(**new))
    assert then == now
    section = next(iter(new))
    if section != "clients_per_round":
        assert now.model_dump(mode="json")[section]["kind"] == new[section]["kind"]  # type: ignore[index]


@pytest.mark.parametrize("section", ["aggregator", "control", "asynchronous", "secagg", "federated_eval"])
def test_every_section_is_off_by_default_as_kind_none(section: str) -> None:
    assert parse_config(tiny_config()).model_dump(mode="json")[section]["kind"] == "none"


def test_a_setting_of_an_off_section_is_one_error_naming_the_kind_to_set() -> None:
    with pytest.raises(ConfigError, match=r"secagg\.num_shares is set but secagg\.kind is none"):
        parse_config(tiny_config(secagg={"kind": "none", "num_shares": 5}))
    with pytest.raises(ConfigError, match=r"federated_eval\.holdout is set but federated_eval\.kind is none"):
        parse_config(tiny_config(federated_eval={"kind": "none", "holdout": 0.2}))
    with pytest.raises(ConfigError, match=r"federated_eval\.kind=holdout needs holdout > 0"):
        parse_config(tiny_config(federated_eval={"kind": "holdout"}))


def test_old_keys_and_offs_on_the_command_line_win_over_the_file() -> None:
    with pytest.warns(SpellingNote, match=r"asynchronous\.mode=fedbuff is spelled asynchronous\.kind now"):
        cfg = load_config(QUICKSTART, ["asynchronous.mode=fedbuff", "clients_per_round=null", "clock.kind=trace"])
    assert cfg.asynchronous.kind == "fedbuff" and cfg.clock.kind == "trace"
    with pytest.warns(
        SpellingNote,
        match=r"asynchronous\.trace\.synthetic\.clients=70 is spelled clock\.trace\.synthetic\.clients now",
    ):
        cfg = load_config(QUICKSTART, ["clock.kind=trace", "asynchronous.trace.synthetic.clients=70"])
    assert cfg.clock.trace.synthetic.clients == 70
    with pytest.warns(SpellingNote, match=r"aggregator\.kind=mean is spelled aggregator\.kind=none now"):
        assert load_config(QUICKSTART, ["aggregator.kind=median", "aggregator.kind=mean"]).aggregator.kind == "none"


def test_a_split_config_with_control_fixed_loads_as_none() -> None:
    from fedsim.split.config import SplitConfig
    from tests.split_fixtures import split_config

    with pytest.warns(SpellingNote, match=r"control\.kind=fixed is spelled control\.kind=none now"):
        cfg = split_config(control={"kind": "fixed", "knob": {"name": "tau", "ladder": [2]}})
    assert isinstance(cfg, SplitConfig) and cfg.control.kind == "none"


def test_a_config_in_todays_format_is_read_as_it_is_and_an_unknown_format_is_refused() -> None:
    """config.json says format 2; a format-2 file is not respelled (an old spelling there is an error, no note);
    a format fedsim does not know is one line."""
    assert parse_config(tiny_config(rounds=1)).model_dump(mode="json")["format"] == 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ConfigError, match=r"^aggregator\.kind: Input should be 'none'"):
            parse_config({**tiny_config(aggregator={"kind": "mean"}), "format": 2})
    with pytest.raises(ConfigError, match=r"^format=3: this fedsim reads config formats 1 and 2$"):
        parse_config({**tiny_config(), "format": 3})
    with pytest.warns(SpellingNote, match="aggregator.kind=mean"):
        assert parse_config({**tiny_config(aggregator={"kind": "mean"}), "format": 1}).format == 2


# an earlier fedsim's config.json held every client-optimiser setting of every kind, at its defaults
SAVED_ALGORITHM = {
    "kind": "fedavg", "lr": 0.01, "local_epochs": 1, "local_steps": None, "batch_size": 16, "weight_decay": 0.0,
    "local_momentum": 0.0, "nesterov": False, "optimizer": "adam", "betas": [0.9, 0.999], "eps": 1e-8,
    "eva_damping": 0.03, "eva_kl_clip": 0.001, "eva_decay": 0.95, "optimizer_state": "client",
}  # fmt: skip


def test_the_client_optimizers_flattened_settings_load_as_its_section() -> None:
    note = "algorithm.{optimizer, local_momentum, optimizer_state} are spelled algorithm.client_optimizer.{kind,"
    with pytest.warns(SpellingNote, match=re.escape(note)):
        then = parse_config(tiny_config(algorithm={"kind": "fedavg", "optimizer": "eva", "local_momentum": 0.9,
                                                   "optimizer_state": "client"}))  # fmt: skip
    now = parse_config(tiny_config(algorithm={"kind": "fedavg", "client_optimizer": {"kind": "eva", "momentum": 0.9,
                                                                                     "state": "client"}}))  # fmt: skip
    assert then == now
    with pytest.warns(SpellingNote, match=r"algorithm\.\{weight_decay, local_momentum, nesterov, optimizer, betas"):
        saved = parse_config(tiny_config(algorithm=SAVED_ALGORITHM))
    assert local_training(saved.algorithm).client_optimizer.model_dump() == {
        "kind": "adam", "weight_decay": 0.0, "state": "client", "betas": (0.9, 0.999), "eps": 1e-8,
    }  # fmt: skip
    with pytest.warns(SpellingNote, match=r"algorithm\.local_momentum=0\.9 is spelled algorithm\.client_optimizer"):
        momentum = local_training(load_config(QUICKSTART, ["algorithm.local_momentum=0.9"]).algorithm)
        assert momentum.client_optimizer.model_dump() == {
            "kind": "sgd", "weight_decay": 0.0, "state": "reset", "momentum": 0.9, "nesterov": False,
        }  # fmt: skip
    with pytest.raises(
        ConfigError, match=r"algorithm\.local_momentum and algorithm\.client_optimizer\.momentum are one"
    ):
        parse_config(
            tiny_config(algorithm={"kind": "fedavg", "local_momentum": 0.5, "client_optimizer": {"momentum": 0.9}})
        )


def test_weight_decay_on_the_command_line_goes_where_the_algorithm_keeps_it() -> None:
    """A federated client's optimiser holds it; a gossiping node's algorithm holds its own."""
    from fedsim.algorithms.gossip import GossipConfig

    examples = QUICKSTART.parent
    node = load_config(examples / "decentralised.yaml", ["algorithm.weight_decay=0.001"]).algorithm
    assert isinstance(node, GossipConfig) and node.weight_decay == 0.001
    with pytest.warns(SpellingNote, match=r"algorithm\.weight_decay is spelled algorithm\.client_optimizer\.weight"):
        client = local_training(load_config(QUICKSTART, ["algorithm.weight_decay=0.001"]).algorithm)
    assert client.client_optimizer.weight_decay == 0.001
