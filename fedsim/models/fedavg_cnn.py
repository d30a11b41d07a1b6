"""The MNIST CNN of McMahan et al. (AISTATS 2017, "Communication-Efficient Learning of Deep Networks from
Decentralized Data", Section 3): two 5x5 convolutions of 32 and 64 channels, each followed by a 2x2 max-pool,
a fully connected layer of 512 ReLU units and a softmax output, 1,663,370 parameters on 28x28 digits.

The paper does not state the padding; its parameter count fixes it: "same" padding keeps 7x7 maps after the
two pools, and 64 * 7 * 7 * 512 + 512 + 51,264 + 832 + 5,130 = 1,663,370, while unpadded ("valid")
convolutions would leave 4x4 maps and 582,026 parameters. It is LEAF's FEMNIST CNN (:mod:`fedsim.models.leaf`,
which took it from this paper) with 512 hidden units instead of 2,048, and is FedML's ``CNN_OriginalFedAvg``.
"""

from __future__ import annotations

from torch import nn

from fedsim.models.leaf import femnist_cnn

HIDDEN = 512  # the fully connected layer's ReLU units (the paper: "a fully connected layer with 512 units")


def fedavg_cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Sequential:
    """conv5x5(32, same) -> ReLU -> pool -> conv5x5(64, same) -> ReLU -> pool -> dense(512) -> ReLU -> classes,
    on one 28x28 channel; a flat (784,) input is viewed as that channel."""
    return femnist_cnn(input_shape, num_classes, hidden=HIDDEN, kind="fedavg_cnn")
