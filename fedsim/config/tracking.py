"""Where a run's metrics go beside the run store: CSV, TensorBoard, Weights & Biases (offline unless asked)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from fedsim.config.base import Strict

Backend = Literal["csv", "tensorboard", "wandb"]
# the package each backend writes with, and the extra that installs it
PACKAGES: dict[str, tuple[str, str]] = {"tensorboard": ("tensorboard", "tracking"), "wandb": ("wandb", "tracking")}


class TrackingConfig(Strict):
    """``tracking: [csv, tensorboard, wandb]`` or the mapping below: each round's metrics, by their names in the
    run store (``train_loss``, ``test_accuracy``, ``bytes_up``, ``epsilon``, ...), written by each backend under
    ``dir`` (default: the run's output directory): ``metrics.csv``, ``tensorboard/`` event files, and a W&B run
    in ``wandb/``, offline unless ``wandb_mode: online`` (nothing leaves the machine until you ``wandb sync``)."""

    backends: tuple[Backend, ...] = Field((), description="where each round's metrics go: csv, tensorboard, wandb")
    dir: Path | None = Field(None, description="default: the run's output directory")
    wandb_project: str = Field("fedsim", min_length=1, description="the W&B project")
    wandb_mode: Literal["offline", "online"] = Field(
        "offline", description="offline (no network, synced later with wandb sync) or online"
    )

    @model_validator(mode="before")
    @classmethod
    def _a_list_names_the_backends(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"backends": [value]}
        return {"backends": value} if isinstance(value, (list, tuple)) else value

    @field_validator("backends")
    @classmethod
    def _installed_once(cls, backends: tuple[str, ...]) -> tuple[str, ...]:
        repeated = sorted({b for b in backends if backends.count(b) > 1})
        if repeated:
            raise ValueError(f"tracking names {repeated[0]} twice")
        for backend in backends:
            package, extra = PACKAGES.get(backend, ("", ""))
            if package and importlib.util.find_spec(package) is None:
                raise ValueError(
                    f"tracking: {backend} needs the {package} package, which is not installed: "
                    f"pip install 'fedsim[{extra}]'"
                )
        return backends

    @property
    def enabled(self) -> bool:
        return bool(self.backends)
