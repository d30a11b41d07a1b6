"""``fedsim.Simulation``: the Python face of a run, the same engine the YAML path goes through.

    from fedsim import Simulation

    sim = Simulation("examples/quickstart.yaml", model=my_model_factory, callbacks=[stop_at(0.9)])
    summary = sim.run()

``config`` is a :class:`~fedsim.config.RunConfig`, a plain tree, or a YAML path (with ``overrides``).
``model`` is a factory called as ``factory(input_shape, num_classes, **model.kwargs)`` under the run's seed,
exactly as YAML's ``model: {kind: python, factory: "pkg.mod:fn"}`` calls it, so both give the same run; or a
module you built (its initial weights are then yours). ``data`` is a federated dataset
(:class:`~fedsim.data.base.FederatedDataset`). ``task`` is a :class:`~fedsim.tasks.Task` or a loss function
``loss(output, target)``, standing in for YAML's ``task: {kind: python, factory: ...}``. Each callback is
called after every round with the simulation and the round's row; it may change a hyper-parameter for the next
round (:meth:`Simulation.set`) and stops the run by returning True.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from torch import nn

from fedsim.config import ConfigError, RunConfig, load_config, parse_config, validate
from fedsim.data.base import FederatedDataset
from fedsim.models import ModelFactory
from fedsim.runstore import RoundRow
from fedsim.sim.engine import Engine
from fedsim.sim.summary import Summary
from fedsim.tasks import Task
from fedsim.tasks.custom import LossFn

Callback = Callable[["Simulation", RoundRow], bool | None]


class Simulation:
    """One federated simulation, configured as in YAML, with your own model, data and callbacks."""

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
        db: str | Path = "runs/fedsim.db",
    ) -> None:
        if isinstance(config, RunConfig):
            self.cfg = config
        elif isinstance(config, Mapping):
            self.cfg = parse_config(dict(config))
        else:
            self.cfg = load_config(config, list(overrides))
        if data is not None and data.num_clients != self.cfg.data.clients:
            raise ConfigError(f"data= has {data.num_clients} clients; data.clients is {self.cfg.data.clients}")
        self.callbacks = list(callbacks)
        self.out = Path(out) if out is not None else Path("out") / self.cfg.name
        self.engine = Engine(self.cfg, out_dir=self.out, db_path=Path(db), dataset=data, model=model, task=task)

    @property
    def round(self) -> int:
        """Rounds done so far."""
        return self.engine.next_round

    def set(self, name: str, value: float | int) -> None:
        """Change an algorithm hyper-parameter (``lr``, ``mu``, ``local_steps``, ...) from the next round on."""
        algorithm = self.engine.algorithm
        cfg = getattr(algorithm, "cfg", None)
        if cfg is None or name not in type(cfg).model_fields:
            raise ConfigError(f"algorithm.{name}: no such setting of algorithm {self.cfg.algorithm.name!r}")
        try:
            algorithm.cfg = validate(type(cfg), {**cfg.model_dump(), name: value})  # type: ignore[attr-defined]
        except ConfigError as exc:
            raise ConfigError(f"algorithm.{exc}") from None

    def get(self, name: str) -> Any:
        return getattr(self.engine.algorithm.cfg, name)  # type: ignore[attr-defined]

    def run(self) -> Summary:
        """Every round (or until a callback returns True); writes summary.json and the model like ``fedsim run``."""

        def after_round(row: RoundRow) -> bool:
            stop = False
            for callback in self.callbacks:
                stop = bool(callback(self, row)) or stop
            return stop

        return self.engine.run(after_round if self.callbacks else None)
