"""Hugging Face ``datasets`` on disk: a dataset saved with ``save_to_disk``, or a folder of class folders of
images (``datasets``' imagefolder builder), as a federated dataset.

Clients come from a column (the natural partition: one client per writer or user), from a fedsim partitioner,
or from a Flower Datasets partitioner, which sees the training rows as the ``datasets.Dataset`` it expects and
whose partitions are read back as row indices. Images become float32 ``(channels, height, width)`` in [0, 1];
other inputs float32 arrays. Eager datasets are read into one array once; lazy ones stay in the memory-mapped
Arrow files, and a client's rows are read when it trains.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedsim.config import ColumnPartition, ConfigError, FlwrPartition, HfDiskData, ImageFolderData
from fedsim.config.imports import resolve
from fedsim.data.base import ArrayDataset, ClientData, FederatedDataset
from fedsim.data.partition import partition

if TYPE_CHECKING:
    from datasets import Dataset

ROW = "__fedsim_row__"  # the row index a Flower partitioner's partitions carry back


def _datasets() -> Any:
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            "reading Hugging Face datasets needs the datasets package: pip install 'fedsim[data]'"
        ) from None
    datasets.disable_progress_bars()
    return datasets


def hf_disk(cfg: HfDiskData, seed: int) -> FederatedDataset:
    """The dataset saved at ``cfg.path``, its training rows partitioned among ``cfg.clients``."""
    datasets = _datasets()
    try:
        loaded = datasets.load_from_disk(str(cfg.path))
    except (FileNotFoundError, ValueError, OSError) as exc:
        raise ConfigError(f"{cfg.path}: not a dataset saved by save_to_disk ({str(exc).splitlines()[0]})") from None
    test = None
    if isinstance(loaded, datasets.DatasetDict):
        if cfg.split not in loaded:
            raise ConfigError(f"data.split: {cfg.path} has no split {cfg.split!r}; splits are {list(loaded)}")
        train = loaded[cfg.split]
        test = loaded[cfg.test_split] if cfg.test_split is not None and cfg.test_split in loaded else None
    else:
        train = loaded
    columns = {"features": cfg.features, "label": cfg.label}
    if isinstance(cfg.partition, ColumnPartition):
        columns["partition.column"] = cfg.partition.column
    for field, column in columns.items():
        if column not in train.column_names:
            raise ConfigError(
                f"data.{field}: column {column!r} does not exist in {cfg.path}; columns are {train.column_names}"
            )
    return federate_rows(train, test, cfg, seed)


def image_folder(cfg: ImageFolderData, seed: int) -> FederatedDataset:
    """Every image under ``cfg.dir/<class>/``, labelled by its folder; a test split of ``test_fraction``."""
    datasets = _datasets()
    try:
        train = datasets.load_dataset("imagefolder", data_dir=str(cfg.dir), split="train")
    except Exception as exc:  # the builder raises several kinds for an empty or unreadable folder
        raise ConfigError(f"{cfg.dir}: no images in class folders ({type(exc).__name__}: {exc})") from None
    hf = HfDiskData(
        dataset="hf_disk",
        path=cfg.dir,
        clients=cfg.clients,
        test_fraction=cfg.test_fraction,
        partition=cfg.partition,
        features="image",
        label="label",
    )
    return federate_rows(train, None, hf, seed, size=cfg.size, mode=cfg.mode)


def federate_rows(
    train: Dataset,
    test: Dataset | None,
    cfg: HfDiskData,
    seed: int,
    size: tuple[int, int] | None = None,
    mode: str | None = None,
) -> FederatedDataset:
    rng = np.random.default_rng(seed)
    if test is None:  # hold out test_fraction of the rows
        order = rng.permutation(len(train))
        cut = max(1, round(len(train) * cfg.test_fraction))
        test, train = train.select(np.sort(order[:cut])), train.select(np.sort(order[cut:]))
    labels, num_classes, encode = _labels(train, cfg.label)
    parts = _partition(train, labels, cfg, rng)
    inputs = _Inputs(train, cfg.features, size, mode)
    test_x = inputs(test)
    test_y = torch.as_tensor(encode(_column(test, cfg.label)))
    test_data = ClientData(torch.as_tensor(test_x), test_y)
    if cfg.lazy:
        return LazyRows(train, parts, labels, test_data, num_classes, inputs)
    return ArrayDataset(inputs(train), labels, parts, test_data, num_classes=num_classes)


def _labels(train: Dataset, column: str) -> tuple[np.ndarray, int, Any]:
    """The training labels as int64 class indices (or float targets), the class count, and the encoding."""
    feature = train.features[column]
    raw = _column(train, column)
    names = getattr(feature, "names", None)
    if names is not None:  # a ClassLabel: already indices
        return raw.astype(np.int64), len(names), lambda y: np.asarray(y, dtype=np.int64)
    if raw.dtype.kind in "iu":
        return raw.astype(np.int64), int(raw.max()) + 1, lambda y: np.asarray(y, dtype=np.int64)
    if raw.dtype.kind == "f":
        width = 1 if raw.ndim == 1 else int(np.prod(raw.shape[1:]))
        return raw.astype(np.float32), width, lambda y: np.asarray(y, dtype=np.float32)
    classes = np.unique(raw)  # strings: classes in sorted order

    def encode(y: np.ndarray) -> np.ndarray:
        index = np.searchsorted(classes, y)
        if (index >= len(classes)).any() or (classes[np.minimum(index, len(classes) - 1)] != y).any():
            raise ConfigError(f"data.label: the test split has labels the training split does not ({column!r})")
        return index.astype(np.int64)

    return encode(raw), len(classes), encode


def _partition(train: Dataset, labels: np.ndarray, cfg: HfDiskData, rng: np.random.Generator) -> list[np.ndarray]:
    scheme = cfg.partition
    if isinstance(scheme, ColumnPartition):
        values = _column(train, scheme.column)
        uniques, codes = np.unique(values, return_inverse=True)
        if len(uniques) < cfg.clients:
            raise ConfigError(
                f"data.clients={cfg.clients}, but column {scheme.column!r} has {len(uniques)} distinct values: "
                f"set data.clients: {len(uniques)} for one client per value"
            )
        order = np.argsort(codes, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(codes, minlength=len(uniques)))])
        return [order[bounds[k] : bounds[k + 1]] for k in range(cfg.clients)]
    if isinstance(scheme, FlwrPartition):
        return _flwr_parts(train, scheme, cfg.clients)
    if labels.dtype.kind == "f":
        raise ConfigError(f"data.partition.kind={scheme.kind} splits by class; regression targets have none")
    return partition(scheme, labels, cfg.clients, rng)


def _flwr_parts(train: Dataset, scheme: FlwrPartition, clients: int) -> list[np.ndarray]:
    path = scheme.partitioner if ":" in scheme.partitioner else f"flwr_datasets.partitioner:{scheme.partitioner}"
    make = resolve(path, "data.partition.partitioner")
    try:
        partitioner = make(num_partitions=clients, **scheme.kwargs)
        partitioner.dataset = train.add_column(ROW, np.arange(len(train)))
        parts = [np.asarray(partitioner.load_partition(k)[ROW], dtype=np.int64) for k in range(clients)]
    except Exception as exc:  # the partitioner's own checks: one line naming it
        raise ConfigError(f"data.partition: {path} failed ({type(exc).__name__}: {exc})") from None
    empty = [k for k, p in enumerate(parts) if len(p) == 0]
    if empty:
        raise ConfigError(f"data.partition: {len(empty)} of {clients} clients got no rows (first: client {empty[0]})")
    return parts


def _column(rows: Dataset, column: str) -> np.ndarray:
    """One column of ``rows`` as a numpy array, reading no other column."""
    return np.asarray(rows.with_format("numpy", columns=[column])[:][column])


class _Inputs:
    """A ``features`` column as float32: images (an ``Image`` feature, or uint8 arrays) to (channels, height,
    width) in [0, 1], converted and resized when asked; other arrays and numbers as they are."""

    def __init__(self, train: Dataset, column: str, size: tuple[int, int] | None, mode: str | None) -> None:
        feature = train.features[column]
        self.column, self.size, self.mode = column, size, mode
        self.decoded = type(feature).__name__ == "Image"  # PIL images
        self.image = self.decoded or getattr(feature, "dtype", None) == "uint8"

    def __call__(self, rows: Dataset) -> np.ndarray:
        if self.decoded:
            x = np.stack([np.asarray(self._image(im)) for im in rows[self.column]])
        else:  # numpy formatting widens every integer type to int64: the feature says what it was
            x = _column(rows, self.column)
        if x.dtype == object:
            raise ConfigError(f"data.features: the rows of column {self.column!r} differ in shape")
        if x.dtype.kind not in "iufb":
            raise ConfigError(f"data.features: column {self.column!r} holds {x.dtype}, not numbers or images")
        out = x.astype(np.float32)
        if self.image:
            out /= 255.0
            if out.ndim == 4:  # (n, h, w, c) -> (n, c, h, w)
                out = out.transpose(0, 3, 1, 2)
            elif out.ndim == 3:  # grey (n, h, w) -> (n, 1, h, w)
                out = out[:, None]
        return np.ascontiguousarray(out)

    def _image(self, image: Any) -> Any:
        if self.mode is not None:
            image = image.convert(self.mode)
        return image.resize(self.size) if self.size is not None else image


class LazyRows:
    """Clients read from the memory-mapped Arrow table when asked, so the population never sits in memory."""

    def __init__(
        self,
        train: Dataset,
        parts: list[np.ndarray],
        labels: np.ndarray,
        test: ClientData,
        num_classes: int,
        inputs: _Inputs,
    ) -> None:
        self._train, self._parts, self._labels, self._inputs = train, parts, labels, inputs
        self.num_clients = len(parts)
        self.num_classes = num_classes
        self.test = test
        self.input_shape = tuple(inputs(train.select(range(1))).shape[1:])

    def client(self, cid: int) -> ClientData:
        rows = self._parts[cid]
        x = self._inputs(self._train.select(rows))
        return ClientData(torch.from_numpy(x), torch.as_tensor(self._labels[rows]))

    def n_samples(self, cid: int) -> int:
        return len(self._parts[cid])
