"""ResNet-18 with GroupNorm for 32x32 images (CIFAR-style: 3x3 stem, no max-pool), the FL field's usual choice
(Hsieh et al., 2020: BatchNorm fails under label skew, GroupNorm does not)."""

from __future__ import annotations

from torch import Tensor, nn

from fedsim.config import ConfigError


def _norm(channels: int, groups: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(groups, channels), channels)


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm1 = _norm(cout, groups)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.norm2 = _norm(cout, groups)
        self.relu = nn.ReLU()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _norm(cout, groups))

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


def resnet18_gn(input_shape: tuple[int, ...], num_classes: int, groups: int = 2, width: int = 64) -> nn.Sequential:
    """ResNet-18 (blocks 2-2-2-2, widths ``width`` x 1, 2, 4, 8) with ``groups`` GroupNorm groups per layer.

    ``input_shape`` is (channels, height, width); a flat input of 3 x 32 x 32 values is viewed as one image.
    """
    flat = len(input_shape) == 1
    if flat:
        if input_shape[0] != 3 * 32 * 32:
            raise ConfigError(f"model.kind=resnet18_gn needs (channels, height, width) images; got {list(input_shape)}")
        input_shape = (3, 32, 32)
    if len(input_shape) != 3:
        raise ConfigError(f"model.kind=resnet18_gn needs (channels, height, width) images; got {list(input_shape)}")
    layers: list[nn.Module] = [
        nn.Unflatten(1, input_shape) if flat else nn.Identity(),
        nn.Conv2d(input_shape[0], width, 3, 1, 1, bias=False),
        _norm(width, groups),
        nn.ReLU(),
    ]
    cin = width
    for stage, cout in enumerate(width * m for m in (1, 2, 4, 8)):
        for block in range(2):
            layers.append(BasicBlock(cin, cout, 2 if stage and not block else 1, groups))
            cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)
