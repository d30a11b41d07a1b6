"""User data from a file: ``.npz`` with arrays ``x`` and ``y``, or ``.csv``/``.parquet`` with a label column."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from fedsim.config import ConfigError, FileData
from fedsim.data.base import ArrayDataset
from fedsim.data.split import federate


def _from_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            missing = [k for k in ("x", "y") if k not in npz.files]
            if missing:
                raise ConfigError(f"{path}: missing array {missing[0]!r}; found {sorted(npz.files)}")
            return np.asarray(npz["x"]), np.asarray(npz["y"])
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable .npz file ({exc})") from None


def _from_table(path: Path, label: str) -> tuple[np.ndarray, np.ndarray]:
    import pyarrow as pa  # here, not at import: a run without a table file should not pay ~30 ms for it
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path) if path.suffix.lower() == ".parquet" else pacsv.read_csv(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise ConfigError(f"{path}: cannot read table ({str(exc).splitlines()[0]})") from None
    if label not in table.column_names:
        raise ConfigError(f"{path}: no label column {label!r}; columns are {table.column_names}")
    features = [n for n in table.column_names if n != label]
    for name in features:
        kind = table.schema.field(name).type
        if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
            raise ConfigError(f"{path}: feature column {name!r} is {kind}, not numeric")
    if not features:
        raise ConfigError(f"{path}: no feature columns besides the label {label!r}")
    x = np.stack([table.column(n).to_numpy(zero_copy_only=False) for n in features], axis=1)
    return x, table.column(label).to_numpy(zero_copy_only=False)


def _finite_floats(array: np.ndarray, not_numeric: str, where: str) -> np.ndarray:
    """``array`` as float32, or one ConfigError: ``not_numeric``, or ``where`` NaN or infinite values."""
    try:
        floats = array.astype(np.float32)
    except (TypeError, ValueError):
        raise ConfigError(not_numeric) from None
    if not np.isfinite(floats).all():
        raise ConfigError(f"{where} NaN or infinite values")
    return floats


def user_file(cfg: FileData, seed: int, regression: bool = False) -> ArrayDataset:
    """Labels of any type are mapped to 0..C-1 in sorted order, or with ``regression`` kept as float32
    targets; features become float32."""
    path = cfg.path
    x, y = _from_npz(path) if path.suffix.lower() == ".npz" else _from_table(path, cfg.label)
    if len(x) == 0:
        raise ConfigError(f"{path}: no samples")
    if len(x) != len(y):
        raise ConfigError(f"{path}: x has {len(x)} samples but y has {len(y)}")
    if y.ndim != 1:
        raise ConfigError(f"{path}: y must be one label per sample, got shape {y.shape}")
    x = _finite_floats(x, f"{path}: features are not numeric (dtype {x.dtype})", f"{path}: features contain")
    if regression:
        why = f"{path}: task.kind regression needs numeric targets (y dtype {y.dtype})"
        targets = _finite_floats(y, why, f"{path}: targets contain")
        return federate(x, targets, cfg.clients, cfg.partition, cfg.test_fraction, seed)
    _, labels = np.unique(y, return_inverse=True)
    return federate(x, labels.astype(np.int64), cfg.clients, cfg.partition, cfg.test_fraction, seed)
