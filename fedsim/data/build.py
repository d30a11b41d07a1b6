"""``build_dataset``: the one entry point the engine uses to get its federated dataset."""

from __future__ import annotations

from fedsim.config import (
    ConfigError,
    CrossDeviceTextData,
    DataConfig,
    DigitsData,
    FileData,
    HfDiskData,
    ImageFolderData,
    LeafData,
    MnistData,
    ProvidedData,
    PythonData,
    RandomData,
    Sst2Data,
    SyntheticData,
    TextData,
)
from fedsim.config.imports import resolve
from fedsim.data.base import FederatedDataset
from fedsim.data.cross_device import CrossDeviceText
from fedsim.data.digits import digits
from fedsim.data.files import user_file
from fedsim.data.hf_disk import hf_disk, image_folder
from fedsim.data.leaf import leaf
from fedsim.data.mnist import mnist
from fedsim.data.random import RandomDataset
from fedsim.data.sst2_federated import sst2
from fedsim.data.synthetic import synthetic
from fedsim.data.text import text_folder


def build_dataset(cfg: DataConfig, seed: int, regression: bool = False) -> FederatedDataset:
    """The configured dataset, partitioned among ``cfg.clients``; deterministic in (cfg, seed). ``regression``
    (``task.kind: regression``): a file's ``y`` holds float targets, not class labels."""
    if isinstance(cfg, DigitsData):
        return digits(cfg, seed)
    if isinstance(cfg, SyntheticData):
        return synthetic(cfg, seed)
    if isinstance(cfg, FileData):
        return user_file(cfg, seed, regression)
    if isinstance(cfg, RandomData):
        return RandomDataset(cfg, seed)
    if isinstance(cfg, CrossDeviceTextData):
        return CrossDeviceText(cfg, seed)
    if isinstance(cfg, MnistData):
        return mnist(cfg, seed)
    if isinstance(cfg, LeafData):
        return leaf(cfg)
    if isinstance(cfg, HfDiskData):
        return hf_disk(cfg, seed)
    if isinstance(cfg, ImageFolderData):
        return image_folder(cfg, seed)
    if isinstance(cfg, Sst2Data):
        return sst2(cfg, seed)
    if isinstance(cfg, TextData):
        return text_folder(cfg, seed)
    if isinstance(cfg, PythonData):
        make = resolve(cfg.factory, "data.factory")
        try:
            dataset = make(clients=cfg.clients, seed=seed, **cfg.kwargs)
        except Exception as exc:  # the user's code: one line naming it, not a traceback
            raise ConfigError(f"data.factory: {type(exc).__name__}: {exc}") from None
        return checked(dataset, cfg.clients)
    if isinstance(cfg, ProvidedData):
        raise ConfigError("data.dataset: provided is the dataset given to Simulation(data=...) in Python")
    raise TypeError(f"unknown dataset config {cfg!r}")  # pragma: no cover - the union is closed


def checked(dataset: object, clients: int) -> FederatedDataset:
    """``dataset`` if it has what the engine reads (and ``clients`` clients), else a one-line ConfigError."""
    missing = [
        a
        for a in ("num_clients", "num_classes", "input_shape", "test", "client", "n_samples")
        if not hasattr(dataset, a)
    ]
    if missing:
        raise ConfigError(f"data.factory returned a {type(dataset).__name__} without {', '.join(missing)}")
    if dataset.num_clients != clients:  # type: ignore[attr-defined]
        raise ConfigError(f"data.factory made {dataset.num_clients} clients; data.clients is {clients}")  # type: ignore[attr-defined]
    return dataset  # type: ignore[return-value]
