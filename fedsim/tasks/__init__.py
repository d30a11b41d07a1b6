"""Tasks: a loss plus its metrics, used by local training, evaluation and SkewScout's probes.

:func:`build_task` makes the task a run's ``task`` section names; :func:`evaluate` scores a flat model on
held-out data with it.
"""

from __future__ import annotations

from fedsim.config import ConfigError
from fedsim.config.imports import resolve
from fedsim.config.task import TaskConfig
from fedsim.tasks.base import EvalResult, Task, TaskMismatch
from fedsim.tasks.classification import Classification
from fedsim.tasks.custom import LossFn, LossTask
from fedsim.tasks.evaluate import evaluate, evaluation_sums
from fedsim.tasks.language_model import LanguageModel
from fedsim.tasks.regression import Regression

__all__ = [
    "CLASSIFICATION",
    "Classification",
    "EvalResult",
    "LanguageModel",
    "LossTask",
    "Regression",
    "Task",
    "TaskMismatch",
    "build_task",
    "evaluate",
    "evaluation_sums",
]

CLASSIFICATION = Classification()


def build_task(cfg: TaskConfig, task: Task | LossFn | None = None) -> Task:
    """The task ``cfg`` names; ``task`` (the Python API's ``task=``: a :class:`Task` or a loss function)
    stands in for ``cfg.factory``."""
    if task is None and cfg.kind != "python":
        if cfg.kind == "regression":
            return Regression()
        if cfg.kind == "language_model":
            return LanguageModel(cfg.ignore_index)
        return Classification()
    made: object = task
    if task is None:
        make = resolve(str(cfg.factory), "task.factory")
        try:
            made = make(**cfg.kwargs)
        except Exception as exc:  # the user's code: one line naming it
            raise ConfigError(f"task.factory: {type(exc).__name__}: {exc}") from None
    if isinstance(made, Task):
        return made
    if callable(made):
        return LossTask(made)
    raise ConfigError(f"task: expected a fedsim.tasks.Task or a loss function, got a {type(made).__name__}")
