"""``fedsim.Simulation``: the Python face of a run, the same engine the YAML path goes through.

    from fedsim import Simulation

    sim = Simulation("examples/quickstart.yaml", model=my_model_factory, callbacks=[stop_at(0.9)])
    summary = sim.run()

``config`` is a :class:`~fedsim.config.RunConfig`, a plain tree, or a YAML path (a tree or a path with
``overrides``, as ``--set`` applies them).
``model`` is a factory called as ``factory(input_shape, num_classes, **model.kwargs)`` under the run's seed,
exactly as YAML's ``model: {kind: python, factory: "pkg.mod:fn"}`` calls it, so both give the same run; or a
module you built (its initial weights are then yours). ``data`` is a federated dataset
(:class:`~fedsim.data.base.FederatedDataset`). ``task`` is a :class:`~fedsim.tasks.Task`
or a loss function ``loss(output, target)``, standing in for YAML's ``task: {kind: python, factory: ...}``.

Each callback is called after every round as ``callback(sim, result)`` with a :class:`RoundResult` (the
round's metrics as a dict, its stored row, and the global model on request). It may change a setting for the
next round (:meth:`Simulation.set`), return a mapping of metrics of its own, which are recorded in that
round's row of the run store and in summary.json's ``callback_metrics``, and stops the run by returning True.
Building a ``Simulation`` writes nothing; :meth:`Simulation.run` starts the run.

Under ``torchrun`` the same script is the pool: every rank builds its ``Simulation`` (the same config, data
and model), which joins torchrun's process group, and the ranks train their share of each round's clients
(``devices`` at least the world size), rank 0 keeping the run store, the outputs and the callbacks' view of
the global model, as ``torchrun ... -m fedsim.cli run`` does.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from torch import nn

from fedsim.api.launch import build_engine
from fedsim.config import (
    ConfigError,
    ProvidedData,
    RunConfig,
    load_tree,
    parse_config,
    renamed,
    validate,
)
from fedsim.config.saved import overridden, provided_objects, saved_config
from fedsim.data.base import FederatedDataset, check_dataset
from fedsim.decentralised.gossip import GossipEngine
from fedsim.models import ModelFactory
from fedsim.runstore import RoundRow, default_db
from fedsim.sim.persist.checkpoint import complete
from fedsim.sim.persist.interrupted import stopping_at_safe_points
from fedsim.sim.persist.outputs import clear, held_by_another, holds_run, output_dir, why_no_checkpoint
from fedsim.sim.rounds.engine import Engine
from fedsim.sim.rounds.summary import Summary
from fedsim.sim.run.saved import check_resumable
from fedsim.sim.runtime.pool import join_torchrun
from fedsim.tasks import Task
from fedsim.tasks.custom import LossFn
from fedsim.tracking import round_metrics
from fedsim.tracking.history import history_frame, read_run

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class RoundResult:
    """What a callback gets after each round.

    ``round`` counts rounds done (1 after the first, as ``Simulation.round`` and the log count); ``metrics``
    holds every number the round recorded: ``train_loss``, ``bytes_up``/``bytes_down`` (bytes), ``wall_s``/
    ``train_s`` (seconds), ``samples``, ``clients``, and on evaluated rounds ``test_accuracy``, ``test_loss``
    and the task's own ``test_*``; federated evaluation's spread as ``fed_eval.mean`` etc. (under DP the
    clients' ``train_loss``, ``samples`` and ``fed_eval`` are withheld unless ``privacy.diagnostics``). ``row``
    is the round's row as the run store keeps it. :meth:`model` is the global model as your ``nn.Module``."""

    round: int
    metrics: dict[str, float]
    row: RoundRow
    engine: Engine | GossipEngine

    @classmethod
    def of(cls, row: RoundRow, engine: Engine | GossipEngine) -> RoundResult:
        return cls(row.round + 1, round_metrics(row), row, engine)

    def model(self) -> nn.Module:
        """A copy of the model with this round's global weights (on the run's accelerator)."""
        return global_model(self.engine)


def global_model(engine: Engine | GossipEngine) -> nn.Module:
    """The run's model as a module: the global model, or a decentralised run's average of its nodes'."""
    if isinstance(engine, GossipEngine):
        replica, flat = engine.replica, engine.average
    else:
        replica, flat = engine.executor.replica, engine.global_state
    replica.load_(flat)
    return copy.deepcopy(replica.module)


def load_model(module: nn.Module, path: str | Path) -> nn.Module:
    """Load a run's saved global model into your ``module`` (the one its factory builds), in place, and return
    it: ``path`` is the run's output directory or its ``model.safetensors``, which holds one flat tensor
    (trainable parameters, then float buffers, in the module's order). A module of another size is one
    ConfigError naming both sizes."""
    from safetensors.torch import load_file

    from fedsim.models.replica import ReplicaError, load_flat

    file = Path(path) / "model.safetensors" if Path(path).is_dir() else Path(path)
    if not file.is_file():
        raise ConfigError(f"{file}: no saved model (a finished run writes OUT/model.safetensors)")
    try:
        return load_flat(module, load_file(file)["global"].to(next(module.parameters()).device))
    except ReplicaError as exc:
        raise ConfigError(f"{file}: {exc}") from None


Callback = Callable[["Simulation", RoundResult], bool | Mapping[str, float] | None]


class Simulation:
    """One federated simulation, configured as in YAML, with your own model, data and callbacks. Building it
    writes nothing; :meth:`run` starts the run, :meth:`resume` goes on with an interrupted one.

    :param config: a YAML path, a mapping of the same tree, or a :class:`~fedsim.config.RunConfig`.
    :param model: a factory called as ``factory(input_shape, num_classes, **model.kwargs)`` under the run's
        seed, or a module you built; None: the config's ``model``.
    :param data: a :class:`~fedsim.data.base.FederatedDataset`; None: the config's ``data``.
    :param task: a :class:`~fedsim.tasks.Task` or a loss ``loss(output, target)``; None: the config's ``task``.
    :param callbacks: each called as ``callback(sim, result)`` after every round (:class:`RoundResult`).
    :param overrides: ``key=value`` changes to a path's or a mapping's tree, as ``--set`` makes them.
    :param out: the output directory; None: ``out/NAME`` (or ``out/NAME-2``, ... when that holds a run).
    :param overwrite: replace the run ``out`` holds (refused without it).
    :param db: the run store; None: ``$FEDSIM_DB``, else ``runs/fedsim.db``.
    """

    def __init__(
        self,
        config: RunConfig | Mapping[str, Any] | str | Path,
        *,
        model: ModelFactory | nn.Module | None = None,
        data: FederatedDataset | None = None,
        task: Task | LossFn | None = None,
        callbacks: Sequence[Callback] = (),
        overrides: Sequence[str] = (),
        out: str | Path | None = None,
        overwrite: bool = False,
        db: str | Path | None = None,
    ) -> None:
        provided = {"dataset": "provided", "clients": data.num_clients} if data is not None else None
        if isinstance(config, RunConfig):
            if overrides:
                raise ConfigError("overrides= apply to a YAML path or a mapping; change a RunConfig with model_copy")
            cfg = config
        else:  # your data needs no data: section; summary.json says "provided"
            tree = overridden(load_tree(config) if isinstance(config, str | Path) else config, overrides)
            cfg = renamed(parse_config({**tree, "data": tree.get("data") or provided}), list(overrides))
        if data is not None:
            check_dataset(data)
            if data.num_clients != cfg.data.clients:
                raise ConfigError(f"data= has {data.num_clients} clients; data.clients is {cfg.data.clients}")
            if cfg.data.dataset != "provided":  # the section names data not used
                cfg = cfg.model_copy(update={"data": ProvidedData.model_validate(provided)})
        if out is not None and holds_run(Path(out)) and not overwrite:
            resume = f"fedsim.Simulation.resume({str(out)!r})"
            raise ConfigError(held_by_another(Path(out), f"out={out}", "out", "pass overwrite=True", resume))
        # out/NAME, or out/NAME-2, ... when an earlier run is there, as on the command line: none replaces another
        self._open(cfg, Path(out) if out is not None else output_dir(None, cfg.name, overwrite=False), db, callbacks)
        if overwrite and os.environ.get("RANK", "0") == "0":  # the earlier run's files, so none is taken for this run's
            clear(self.out, overwrite=True)
        join_torchrun()  # chosen before the ranks meet, so rank 0 cannot have written a run there yet
        self.engine = build_engine(self.cfg, self.out, self.db, dataset=data, model=model, task=task)

    @classmethod
    def resume(
        cls,
        out: str | Path,
        *,
        model: ModelFactory | nn.Module | None = None,
        data: FederatedDataset | None = None,
        task: Task | LossFn | None = None,
        callbacks: Sequence[Callback] = (),
        db: str | Path | None = None,
    ) -> Simulation:
        """The run in ``out`` put back to its newest checkpoint, ready to :meth:`run` its remaining rounds: as
        ``fedsim resume OUT``, and for a run made with Python objects, given the same ``model``, ``data`` and
        ``task`` again (the config does not hold them; one missing is one ConfigError naming it)."""
        out = Path(out)
        cfg = saved_config(out)
        if (out / "summary.json").is_file():
            raise ConfigError(f"{out}: the run finished ({out / 'summary.json'}); nothing to resume")
        if not complete(out / "checkpoints"):
            why = why_no_checkpoint(out)
            raise ConfigError(f"no complete checkpoint in {out / 'checkpoints'}: nothing to resume ({why})")
        given = {"model": model, "data": data, "task": task}
        wanted = provided_objects(out)
        if missing := [name for name in wanted if given[name] is None]:
            said = ", ".join(f"{name}=" for name in missing)
            raise ConfigError(f"{out}: the run was made with Python objects; resume it with the same {said} again")
        if data is not None:
            check_dataset(data)
        sim = cls.__new__(cls)
        sim._open(cfg, out, db, callbacks)
        if join_torchrun().is_root:  # rank 0's store; the other ranks wait for its word in the resume
            check_resumable(out, sim.db)
        sim.engine = build_engine(cfg, out, sim.db, resume=True, dataset=data, model=model, task=task)
        return sim

    def _open(self, cfg: RunConfig, out: Path, db: str | Path | None, callbacks: Sequence[Callback]) -> None:
        """``db`` None: ``$FEDSIM_DB``, else runs/fedsim.db (:func:`fedsim.runstore.default_db`)."""
        self.cfg, self.out, self.callbacks = cfg, out, list(callbacks)
        self.db = Path(db) if db is not None else default_db()

    @property
    def round(self) -> int:
        """Rounds done so far."""
        return self.engine.next_round

    def set(self, name: str, value: Any) -> None:
        """Change an algorithm setting (``lr``, ``mu``, ``local_steps``, ``weighting``, ...), named
        ``client_optimizer.<setting>`` the client optimiser's (``kind``, ``momentum``, ``state``, ...), or, named
        ``server_optimizer.<setting>``, a server optimiser's (``lr``, ``momentum``, ``beta1``, ...) from the next
        round on. Whatever the engine derives from it is derived again (the clients' weights, whether they keep
        state, the executor; the optimiser's state goes on); a bad value, or one that cannot apply (``kind``;
        ``client_optimizer.momentum`` under ``executor.kind: fused``), is one ConfigError naming the field. A
        resumed run starts from its config.json's settings again."""
        if isinstance(self.engine, GossipEngine):
            raise ConfigError(
                f"{name if '.' in name else f'algorithm.{name}'}: a decentralised run"
                f" (algorithm.kind={self.cfg.algorithm.kind}) keeps its settings for the whole run"
            )
        if name.startswith("server_optimizer."):
            return self._set_server_optimizer(self.engine, name.removeprefix("server_optimizer."), value)
        current = self.engine.opt
        section, _, setting = name.partition(".")
        if section == "client_optimizer" and setting:
            client = current.client_optimizer
            kept = {"weight_decay": client.weight_decay, "state": client.state}  # a new kind starts from its defaults
            value = {"kind": value, **kept} if setting == "kind" else {**client.model_dump(), setting: value}
            name = "client_optimizer"
        if name not in type(current).model_fields:
            hint = " (the server's step size is server_optimizer.lr)" if name.startswith("server_lr") else ""
            raise ConfigError(f"algorithm.{name}: no such setting of algorithm {self.cfg.algorithm.kind!r}{hint}")
        if name == "kind":
            raise ConfigError(f"algorithm.kind: a run cannot change its algorithm ({current.kind!r})")
        try:
            changed = validate(type(current), {**current.model_dump(), name: value})
        except ConfigError as exc:
            raise ConfigError(f"algorithm.{exc}") from None
        self.engine.reconfigure(changed)
        self.cfg = self.cfg.model_copy(update={"algorithm": self.engine.cfg.algorithm})  # the settings it now runs

    def _set_server_optimizer(self, engine: Engine, name: str, value: Any) -> None:
        step = engine.server_step
        current = step.cfg
        if name == "kind":
            raise ConfigError(f"server_optimizer.kind: a run cannot change its server optimiser ({current.kind!r})")
        if name not in type(current).model_fields or name == "factory":
            raise ConfigError(f"server_optimizer.{name}: no such setting of server_optimizer.kind={current.kind}")
        try:
            changed = validate(type(current), {**current.model_dump(), name: value})
        except ConfigError as exc:
            raise ConfigError(f"server_optimizer.{exc}") from None
        step.reconfigure(changed)
        self.cfg = self.cfg.model_copy(update={"server_optimizer": changed})
        engine.cfg = self.cfg

    def get(self, name: str) -> Any:
        """An algorithm setting as configured (``lr`` is the base rate; :attr:`lr` is the scheduled one)."""
        value: Any = self.engine.cfg.algorithm  # the engine's config follows set()
        for part in name.split("."):  # client_optimizer.momentum: the client optimiser's
            value = getattr(value, part)
        return value

    @property
    def lr(self) -> float:
        """The clients' learning rate the next round trains with: ``algorithm.lr`` times ``lr_schedule``'s
        factor (each round's is ``lr`` in its round metrics and in the log)."""
        return float(self.engine.cfg.algorithm.client_lr(self.engine.next_round))

    @property
    def history(self) -> pd.DataFrame:
        """The rounds done so far, one row each: ``round`` (1 after the first) and every metric the round
        recorded by its run-store name (``train_loss``, ``test_accuracy`` (NaN between evaluations),
        ``bytes_up``, ``epsilon``, ``malicious``, ``backdoor_success``, your callbacks' metrics, ...)."""
        if not self.engine.run_id:  # not started: no rounds
            return history_frame([])
        return read_run(self.engine.run_id, self.db)

    def model(self) -> nn.Module:
        """A copy of your model with the current global weights (after :meth:`run`: the final ones)."""
        return global_model(self.engine)

    def run(self) -> Summary:
        """Every round (or until a callback returns True); writes summary.json and the model like ``fedsim run``."""

        def after_round(row: RoundRow) -> bool:
            stop = False
            result = RoundResult.of(row, self.engine)
            for callback in self.callbacks:
                said = callback(self, result)
                if isinstance(said, Mapping):
                    self.engine.record_metrics(row, said)
                else:
                    stop = bool(said) or stop
            return stop

        with stopping_at_safe_points():
            return self.engine.run(after_round if self.callbacks else None)
