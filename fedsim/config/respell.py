"""Old spellings of a run config that still load, each moved to today's with a one-line note.

A config is in format :data:`FORMAT` when it says ``format: 2`` (every config.json this fedsim writes does) and
in format 1 otherwise: a config.json written by an earlier fedsim, or a file from its docs, loads with
:class:`SpellingNote` (which ``fedsim run`` prints as one ``note:`` line) and the tree in today's spelling; the
run it describes is the same. A format-2 file is read as it is: an old spelling there is an unknown key.

Format 1 is read until :data:`FORMAT_1_UNTIL`; the first release after that date reads every file as format 2
and drops this module's shims (and the checkpoint's: :mod:`fedsim.sim.persist.resume`).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

FORMAT = 2  # today's config format (RunConfig.format's one value): kind everywhere, kind: none for off
FORMAT_1_UNTIL = "2027-05-31"  # the horizon of the old spellings


class SpellingNote(FutureWarning):
    """An old spelling that still loads, and its new one (``fedsim run`` prints it as one ``note:`` line)."""


# algorithms that were FedAvg plus a server optimiser: their name, the optimiser's kind and its settings' old names
_FEDOPT = {"fedadam": "fedadam", "fedyogi": "fedyogi", "fedavgm": "sgd"}
_MOVED = {"server_lr": "lr", "server_lr_schedule": "schedule", "beta1": "beta1", "beta2": "beta2", "tau": "tau"}


def respelled(
    tree: dict[str, object], decentralised: Callable[[object], bool] = lambda kind: False
) -> tuple[dict[str, object], str | None]:
    """A run's tree in today's spelling, and the note that says what moved (None when nothing did): see each
    ``*_respelled`` below. ``decentralised(kind)`` says whether an algorithm's kind gossips (its settings are a
    node's, not a federated client's)."""
    notes = []
    respells = (
        kind_respelled,
        offs_respelled,
        clock_respelled,
        functools.partial(client_respelled, decentralised=decentralised),
        uplink_respelled,
        algorithm_respelled,
    )
    for respell in respells:
        tree, note = respell(tree)
        notes += [note] if note is not None else []
    return tree, "; ".join(notes) if notes else None


OFF = "none"  # what turns a section off, in every section
# keys that name what a section runs, by their old names
MOVED_KEYS = {"algorithm.name": "algorithm.kind", "asynchronous.mode": "asynchronous.kind"}
# the trace clock's settings, once the asynchronous server's, now every run's clock's
CLOCK_KEYS = ("trace", "max_draws", "retry_s", "target_accuracy", "deadline_s")
# the client optimiser's settings, once the algorithm's own, now its client_optimizer section's
CLIENT_KEYS = {
    "optimizer": "kind", "local_momentum": "momentum", "nesterov": "nesterov", "betas": "betas", "eps": "eps",
    "eva_damping": "damping", "eva_kl_clip": "kl_clip", "eva_decay": "decay", "optimizer_state": "state",
    "weight_decay": "weight_decay",
}  # fmt: skip
MOVED_PREFIXES = {f"asynchronous.{key}": f"clock.{key}" for key in CLOCK_KEYS} | {
    f"algorithm.{old}": f"algorithm.client_optimizer.{new}" for old, new in CLIENT_KEYS.items() if old != "weight_decay"
}  # weight_decay is a gossiping node's own too: a format-1 tree moves it by the algorithm's kind (client_respelled)
# each section's old spelling of off
OLD_OFFS = {"aggregator": "mean", "control": "fixed", "asynchronous": "off"}
# sections that were off when a setting was 0 and are now on by a kind: (that setting, the kind it turns on)
TURNED_ON_BY = {"secagg": ("num_shares", "secagg_plus"), "federated_eval": ("holdout", "holdout")}


def key_respelled(key: str, value: object) -> tuple[str, object, str | None]:
    """A dotted key and its value (a ``--set``, a sweep's grid key) in today's spelling, and the note: an old key
    (``algorithm.name``, ``asynchronous.mode``) as today's, an old off (``aggregator.kind=mean``) as ``none``;
    it wins over the file's setting as any override does."""
    new = MOVED_KEYS.get(key.strip(), key.strip())
    prefix = next((p for p in MOVED_PREFIXES if new == p or new.startswith(p + ".")), None)
    new = new if prefix is None else MOVED_PREFIXES[prefix] + new[len(prefix) :]
    section = new.split(".")[0]
    off = new == f"{section}.kind" and isinstance(value, str) and value.strip() == OLD_OFFS.get(section)
    if new == key.strip() and not off:
        return key, value, None
    shown = value.strip() if isinstance(value, str) else value
    spelled = OFF if off else shown
    return new, spelled, f"{key.strip()}={shown} is spelled {new}{f'={spelled}' if off else ''} now"


def override_respelled(assignment: str) -> tuple[str, str | None]:
    """A ``--set key=value`` in today's spelling (:func:`key_respelled`), and the note."""
    key, sep, value = assignment.partition("=")
    if not sep:
        return assignment, None
    new, spelled, note = key_respelled(key, value)
    return (assignment, None) if note is None else (f"{new}={spelled}", note)


def offs_respelled(tree: dict[str, object]) -> tuple[dict[str, object], str | None]:
    """Every section off as ``kind: none``: ``aggregator.kind: mean``, ``control.kind: fixed`` and
    ``asynchronous.mode: off`` were; ``secagg.num_shares: 0`` and ``federated_eval.holdout: 0`` were too, and a
    non-zero one turned the section on (``kind: secagg_plus``, ``kind: holdout`` now)."""
    out, mode = _key_moved(tree, "asynchronous.mode")
    moved = mode not in (None, OLD_OFFS["asynchronous"])  # an old off is noted with the other offs below
    notes = [f"asynchronous.mode={mode} is spelled asynchronous.kind now"] if moved else []
    for section, old in OLD_OFFS.items():
        value = out.get(section)
        if isinstance(value, dict) and value.get("kind") == old:
            out[section] = {**value, "kind": OFF}
            was = "mode" if section == "asynchronous" and mode is not None else "kind"
            notes.append(f"{section}.{was}={old} is spelled {section}.kind={OFF} now")
    for section, (setting, kind) in TURNED_ON_BY.items():
        value = out.get(section)
        if not isinstance(value, dict) or "kind" in value or setting not in value:
            continue
        number = value[setting]
        if number in (0, 0.0):  # off: the setting's 0 (and SecAgg+'s threshold of 0) go with it
            kept = {k: v for k, v in value.items() if k not in (setting, "reconstruction_threshold")}
            out[section] = {**kept, "kind": OFF}
            notes.append(f"{section}.{setting}=0 is spelled {section}.kind={OFF} now")
        else:
            out[section] = {"kind": kind, **value}
            notes.append(f"{section}.{setting}={number} is spelled {section}.kind={kind} with {setting}={number} now")
    return out, "; ".join(notes) if notes else None


def clock_respelled(tree: dict[str, object]) -> tuple[dict[str, object], str | None]:
    """The asynchronous server's trace, draws and target (``asynchronous.trace``, ...) are the run's clock's
    (``clock.trace``, ...), which an asynchronous run sets to ``kind: trace``; ``asynchronous.kind: sync`` (the
    synchronous baseline on the trace) is a synchronous run on the trace clock: its ``buffer`` the cohort, the
    rest of its ``concurrency`` over-selected."""
    section = tree.get("asynchronous")
    if not isinstance(section, dict) or (section.get("kind", OFF) == OFF and not set(CLOCK_KEYS) & set(section)):
        return tree, None
    kind = section.get("kind", OFF)
    old_clock = tree.get("clock")
    clock: dict[str, object] = dict(old_clock) if isinstance(old_clock, dict) else {}
    rest: dict[str, object] = {}
    notes = []
    for key, value in section.items():
        if key not in CLOCK_KEYS:
            rest[key] = value
        elif key in clock:
            raise ValueError(f"asynchronous.{key} and clock.{key} are one setting: give clock.{key}")
        else:
            clock[key] = value
            notes.append(f"asynchronous.{key} is spelled clock.{key} now")
    out = {**tree, "asynchronous": rest}
    if kind in ("fedbuff", "fedasync") and clock.get("kind") != "trace":
        clock["kind"] = "trace"
        notes.append(f"asynchronous.kind={kind} runs on clock.kind=trace, which is stated now")
    elif kind == "sync":
        buffer, concurrency = _count(rest.get("buffer", 10)), _count(rest.get("concurrency", 100))
        over = max(concurrency - buffer, 0)
        clock |= {"kind": "trace", "over_select": over}
        out |= {"asynchronous": {"kind": OFF}, "clients_per_round": buffer}
        notes.append(
            f"asynchronous.kind=sync is spelled clock.kind=trace with clients_per_round={buffer} and"
            f" clock.over_select={over} now"
        )
    return {**out, "clock": clock}, "; ".join(notes) if notes else None


def client_respelled(
    tree: dict[str, object], decentralised: Callable[[object], bool] = lambda kind: False
) -> tuple[dict[str, object], str | None]:
    """The client optimiser's settings, once flattened into the algorithm's (``algorithm.optimizer``,
    ``local_momentum``, ``betas``, ``eva_damping``, ``optimizer_state``, ...), are its ``client_optimizer``
    section's (``kind``, ``momentum``, ``betas``, ``damping``, ``state``, ...); a gossip run's held them (and
    local training's) at their defaults, and they are dropped (:func:`_node_respelled`)."""
    algorithm = tree.get("algorithm")
    if not isinstance(algorithm, dict):
        return tree, None
    if decentralised(algorithm.get("kind")):
        return _node_respelled(tree, algorithm)
    if not set(CLIENT_KEYS) & set(algorithm):
        return tree, None
    old_client = algorithm.get("client_optimizer")
    client: dict[str, object] = dict(old_client) if isinstance(old_client, dict) else {}
    rest: dict[str, object] = {}
    moved: list[str] = []
    for key, value in algorithm.items():
        new = CLIENT_KEYS.get(str(key))
        if new is None:
            rest[key] = value
        elif new in client:
            raise ValueError(f"algorithm.{key} and algorithm.client_optimizer.{new} are one setting: give the latter")
        else:
            client[new] = value
            moved.append(str(key))
    kind = str(client.get("kind", "sgd"))
    own = _CLIENT_OWN.get(kind, set(client))
    for key, default in _OLD_DEFAULTS.items():  # a saved config.json held every kind's settings, at defaults
        value = client.get(key)
        if key not in own and key in client and (list(value) if isinstance(value, list | tuple) else value) == default:
            del client[key]
    old, new = ", ".join(moved), ", ".join(CLIENT_KEYS[k] for k in moved)
    one = len(moved) == 1
    note = (
        f"algorithm.{old} is spelled algorithm.client_optimizer.{new} now"
        if one
        else f"algorithm.{{{old}}} are spelled algorithm.client_optimizer.{{{new}}} now"
    )
    return {**tree, "algorithm": {**rest, "client_optimizer": client}}, note


# a federated client's settings at their old defaults, which a saved config.json of a gossip run held
_LOCAL_DEFAULTS: dict[str, object] = {
    "optimizer": "sgd", "local_momentum": 0.0, "nesterov": False, "betas": [0.9, 0.999], "eps": 1e-8,
    "eva_damping": 0.03, "eva_kl_clip": 0.001, "eva_decay": 0.95, "optimizer_state": "reset", "local_epochs": 1,
    "local_steps": None, "weighting": "samples",
}  # fmt: skip


def _node_respelled(tree: dict[str, object], algorithm: dict[str, object]) -> tuple[dict[str, object], str | None]:
    """A gossip run's algorithm: its ``weight_decay`` stays its own; a federated client's settings it held at
    their defaults (every saved config.json did) are dropped, and ``weighting`` whatever it was (a node's mixing
    weights are the topology's); one set otherwise stays, an unknown key."""
    dropped = [
        k
        for k, v in algorithm.items()
        if k == "weighting"  # weighed nothing: every node mixes by the topology's weights
        or (k in _LOCAL_DEFAULTS and (list(v) if isinstance(v, tuple) else v) == _LOCAL_DEFAULTS[k])
    ]
    if not dropped:
        return tree, None
    kept = {k: v for k, v in algorithm.items() if k not in dropped}
    named = f"algorithm.{dropped[0]} is" if len(dropped) == 1 else f"algorithm.{{{', '.join(dropped)}}} are"
    note = f"{named} a federated client's, which a gossiping node has not: dropped"
    return {**tree, "algorithm": kept}, note


# each client optimiser's own settings, and the old defaults of the others', which a saved config.json held
_CLIENT_OWN = {
    "sgd": {"kind", "weight_decay", "state", "momentum", "nesterov"},
    "adam": {"kind", "weight_decay", "state", "betas", "eps"},
    "adamw": {"kind", "weight_decay", "state", "betas", "eps"},
    "eva": {"kind", "weight_decay", "state", "momentum", "damping", "kl_clip", "decay"},
}
_OLD_DEFAULTS = {  # by their new names: momentum, nesterov, betas, eps, damping, kl_clip, decay
    CLIENT_KEYS[old]: default
    for old, default in _LOCAL_DEFAULTS.items()
    if old in CLIENT_KEYS and old not in ("optimizer", "optimizer_state")
}


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"asynchronous: {value!r} is not a count")
    return int(value)


def kind_respelled(tree: dict[str, object]) -> tuple[dict[str, object], str | None]:
    """``algorithm.name`` is ``algorithm.kind``, as every other section names what it runs."""
    out, name = _key_moved(tree, "algorithm.name")
    return out, None if name is None else f"algorithm.name={name} is spelled algorithm.kind now"


def _key_moved(tree: dict[str, object], key: str) -> tuple[dict[str, object], object]:
    """The tree with ``key`` (one of :data:`MOVED_KEYS`) under today's name in its section, and its value (None:
    the section does not have it); both names in one section is one error."""
    section, old = key.split(".")
    new = MOVED_KEYS[key].split(".")[1]
    value = tree.get(section)
    if not isinstance(value, dict) or old not in value:
        return tree, None
    if new in value:
        raise ValueError(f"{key} and {MOVED_KEYS[key]} are one setting, spelled {MOVED_KEYS[key]} now: give {new}")
    return {**tree, section: {(new if k == old else k): v for k, v in value.items()}}, value[old]


# 1-bit LAMB's settings when it was an uplink compressor with a server half: the server's, by their new names
_LAMB_KEPT = ("lr", "beta2", "eps", "min_coeff", "max_coeff", "coeff_beta", "factor_min", "factor_max")
_LAMB_MOVED = {"beta": "beta1", **{k: k for k in (*_LAMB_KEPT, "factor_threshold", "warmup")}}


def uplink_respelled(tree: dict[str, object]) -> tuple[dict[str, object], str | None]:
    """``uplink.kind: onebit_lamb`` (a compressor with LAMB's server half) becomes ``uplink.kind: onebit`` (the
    clients' half: ``beta``, ``warmup``) with ``server_optimizer.kind: onebit_lamb`` (the rest, ``beta`` as
    ``beta1``, the old default warm-up of 10 rounds kept)."""
    uplink = tree.get("uplink")
    if not isinstance(uplink, dict) or uplink.get("kind") != "onebit_lamb":
        return tree, None
    if tree.get("server_optimizer") not in (None, {}):
        raise ValueError(
            "uplink.kind=onebit_lamb and server_optimizer both set the server's step; give"
            " server_optimizer.kind=onebit_lamb with uplink.kind=onebit"
        )
    old = {"warmup": 10, **uplink}
    server = {"kind": "onebit_lamb", **{new: old[k] for k, new in _LAMB_MOVED.items() if k in old}}
    rest = {k: v for k, v in old.items() if k not in _LAMB_MOVED and k != "kind"}  # an unknown key stays an error
    clients = {"kind": "onebit", "warmup": old["warmup"], **({"beta": old["beta"]} if "beta" in old else {}), **rest}
    spelled = ", ".join(f"{k}={v}" for k, v in server.items() if k != "kind")
    note = f"uplink.kind=onebit_lamb is spelled uplink.kind=onebit with server_optimizer.kind=onebit_lamb ({spelled})"
    note += " now"
    return {**tree, "uplink": clients, "server_optimizer": server}, note


def algorithm_respelled(tree: dict[str, object]) -> tuple[dict[str, object], str | None]:
    """``algorithm.kind`` fedadam, fedyogi or fedavgm become fedavg with the optimiser of that name (fedavgm's:
    sgd with its momentum), and any algorithm's ``server_lr`` and ``server_lr_schedule`` become the
    optimiser's ``lr`` and ``schedule``."""
    algorithm = tree.get("algorithm")
    if not isinstance(algorithm, dict):
        return tree, None
    name = algorithm.get("kind")
    fedopt = isinstance(name, str) and name in _FEDOPT
    movable = (*_MOVED, "momentum") if fedopt else ("server_lr", "server_lr_schedule")
    moved = {k: algorithm[k] for k in movable if k in algorithm}
    if not fedopt and not moved:
        return tree, None
    kind = _FEDOPT[str(name)] if fedopt else "sgd"
    optimizer = {"kind": kind, **{_MOVED.get(k, k): v for k, v in moved.items()}}
    if name == "fedavgm":
        optimizer.setdefault("momentum", 0.9)  # FedAvgM's default momentum
    if tree.get("server_optimizer") not in (None, {}):
        raise ValueError(
            f"algorithm: {', '.join(moved) or f'kind={name}'} and server_optimizer both set the server's step;"
            f" give server_optimizer alone (server_optimizer.kind={kind})"
        )
    rest = {k: v for k, v in algorithm.items() if k not in moved}
    new = {**tree, "algorithm": {**rest, "kind": "fedavg" if fedopt else name}, "server_optimizer": optimizer}
    spelled = ", ".join(f"{k}={v}" for k, v in optimizer.items() if k != "kind")
    old = f"algorithm.kind={name}" if fedopt else f"algorithm.{'/'.join(moved)}"
    note = (
        f"{old} is spelled server_optimizer.kind={kind}"
        + (f" ({spelled})" if spelled else "")
        + (" with algorithm.kind=fedavg" if fedopt else "")
        + " now"
    )
    return new, note


def today_spelled(tree: dict[str, object], decentralised: Callable[[object], bool]) -> dict[str, object]:
    """A run's tree in today's format: a format-1 tree's spellings moved (:func:`respelled`), with one
    :class:`SpellingNote` saying what moved; today's format as it is. Another format is a ValueError."""
    if tree.get("format", 1) == FORMAT:
        return tree
    if tree.get("format", 1) != 1:
        raise ValueError(f"format={tree['format']!r}: this fedsim reads config formats 1 and {FORMAT}")
    respelt, note = respelled(tree, decentralised)
    if note is not None:
        warnings.warn(note, SpellingNote, stacklevel=3)
    return {**respelt, "format": FORMAT}
