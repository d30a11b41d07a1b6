"""How a labelled training set is split among clients: the partitions a dataset's ``partition`` names."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, JsonValue

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
