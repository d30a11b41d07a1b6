"""The model zoo's field-standard shapes, each laid flat on a replica."""

from __future__ import annotations

import pytest
import torch

from fedsim.config import ConfigError, ModelConfig
from fedsim.models import Replica, build_model


@pytest.mark.parametrize(
    ("kind", "shape", "classes", "params"),
    [
        ("femnist_cnn", (1, 28, 28), 62, 6_603_710),  # LEAF's FEMNIST CNN
        ("resnet18_gn", (3, 32, 32), 10, 11_173_962),  # ResNet-18 on CIFAR-sized images
    ],
)
def test_zoo_models_have_their_published_sizes(kind: str, shape: tuple[int, ...], classes: int, params: int) -> None:
    model = build_model(ModelConfig(kind=kind), shape, classes, seed=0)  # type: ignore[arg-type]
    replica = Replica(model)
    assert replica.n_params == params and replica.n_buffers == 0  # GroupNorm keeps no statistics
    assert model(torch.zeros(2, *shape)).shape == (2, classes)


def test_the_shakespeare_lstm_predicts_the_next_of_80_characters() -> None:
    model = build_model(ModelConfig(kind="shakespeare_lstm", hidden=(256,)), (80,), 80, seed=0)
    assert model(torch.zeros(3, 80)).shape == (3, 80)
    assert Replica(model).n_params == 80 * 8 + 4 * 256 * (8 + 256 + 2) + 4 * 256 * (256 + 256 + 2) + 256 * 80 + 80


def test_zoo_models_refuse_inputs_they_cannot_take() -> None:
    with pytest.raises(ConfigError, match="femnist_cnn needs 28x28 images"):
        build_model(ModelConfig(kind="femnist_cnn"), (64,), 10, seed=0)
    with pytest.raises(ConfigError, match="resnet18_gn needs"):
        build_model(ModelConfig(kind="resnet18_gn"), (5,), 10, seed=0)
