"""The model zoo: logistic regression, MLP, a small CNN, McMahan et al.'s MNIST CNN, LEAF's models, ResNet-18-GN,
Hugging Face sequence classifiers and causal language models, and yours."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from fedsim.config import ConfigError, ModelConfig
from fedsim.config.imports import resolve
from fedsim.models.adapters import adapt
from fedsim.models.cnn import cnn
from fedsim.models.fedavg_cnn import fedavg_cnn
from fedsim.models.hf import hf_sequence_classifier
from fedsim.models.hf_causal import hf_causal_lm
from fedsim.models.leaf import femnist_cnn, shakespeare_lstm
from fedsim.models.mlp import mlp
from fedsim.models.next_word import next_word_lstm
from fedsim.models.replica import Replica
from fedsim.models.resnet import resnet18_gn

__all__ = ["ModelFactory", "Replica", "build_model"]

ModelFactory = Callable[..., nn.Module]  # (input_shape, num_classes, **kwargs) -> a freshly initialised module


def build_model(
    cfg: ModelConfig, input_shape: tuple[int, ...], num_classes: int, seed: int, factory: ModelFactory | None = None
) -> nn.Module:
    """A freshly initialised model on the host; the same ``seed`` gives the same initial weights.

    ``factory`` (the Python API's ``model=``) stands in for ``cfg.factory`` and is called the same way, under
    the same seed, so a run from YAML and the same run from Python start from the same weights.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return adapt(_built(cfg, input_shape, num_classes, factory), cfg.adapter)  # the adapter's init: the seed's


def _built(cfg: ModelConfig, input_shape: tuple[int, ...], num_classes: int, factory: ModelFactory | None) -> nn.Module:
    """``cfg``'s module before its adapter, under the caller's seeded generator."""
    if factory is not None or cfg.kind == "python":
        make = factory if factory is not None else resolve(str(cfg.factory), "model.factory")
        try:
            module = make(input_shape, num_classes, **cfg.kwargs)
        except Exception as exc:  # the user's code: one line naming it, not a traceback
            raise ConfigError(f"model.factory: {type(exc).__name__}: {exc}") from None
        if not isinstance(module, nn.Module):
            raise ConfigError(f"model.factory returned a {type(module).__name__}, not a torch.nn.Module")
        return module
    if cfg.kind == "fedavg_cnn":
        return fedavg_cnn(input_shape, num_classes)
    if cfg.kind == "femnist_cnn":
        return femnist_cnn(input_shape, num_classes)
    if cfg.kind == "shakespeare_lstm":
        return shakespeare_lstm(input_shape, num_classes, cfg.hidden[0] if cfg.hidden else 256)
    if cfg.kind == "next_word_lstm":
        return next_word_lstm(input_shape, num_classes, cfg.hidden)
    if cfg.kind == "hf_sequence_classification":
        return hf_sequence_classifier(input_shape, num_classes, cfg.path)
    if cfg.kind == "hf_causal_lm":
        return hf_causal_lm(input_shape, num_classes, cfg.path, cfg.config)
    if cfg.kind == "resnet18_gn":
        return resnet18_gn(input_shape, num_classes, cfg.groups)
    if cfg.kind == "logistic":
        return mlp(input_shape, num_classes, ())
    if cfg.kind == "mlp":
        return mlp(input_shape, num_classes, cfg.hidden)
    return cnn(input_shape, num_classes, cfg.channels, cfg.norm, cfg.groups)
