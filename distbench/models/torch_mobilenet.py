"""Inverted-residual (MobileNet-family) networks in PyTorch: MobileNetV2 and EfficientNet-B4, which share
torchvision's conv-BN-activation unit. keras_mobilenet.py holds the same networks.

Module names follow torchvision (`features.N...`, `classifier.N`) so state_dict keys line up.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from distbench.models.specs import EFFICIENTNET_B4, MOBILENET_V2_SETTING, efficientnet_blocks, make_divisible


def _conv_bn_act(
    cin: int,
    cout: int,
    kernel: int = 3,
    stride: int = 1,
    groups: int = 1,
    act: Callable[[], nn.Module] | None = None,
    bn_eps: float = 1e-5,
) -> nn.Sequential:
    """torchvision's Conv2dNormActivation: conv (no bias, padding (k-1)//2), BN, optional activation."""
    layers = [
        nn.Conv2d(cin, cout, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout, eps=bn_eps, momentum=0.1),
    ]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


def _relu6() -> nn.Module:
    return nn.ReLU6(inplace=True)


def _silu() -> nn.Module:
    return nn.SiLU(inplace=True)


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand (if t != 1), 3x3 depthwise, 1x1 linear projection."""

    def __init__(self, cin: int, cout: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = int(round(cin * expand_ratio))
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(_conv_bn_act(cin, hidden, 1, act=_relu6))
        layers += [
            _conv_bn_act(hidden, hidden, 3, stride, groups=hidden, act=_relu6),
            nn.Conv2d(hidden, cout, 1, 1, 0, bias=False),
            nn.BatchNorm2d(cout, eps=1e-5, momentum=0.1),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x):
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000, channels: int = 3, dropout: float = 0.2):
        super().__init__()
        cin, last = make_divisible(32), make_divisible(1280)
        features: list[nn.Module] = [_conv_bn_act(channels, cin, 3, 2, act=_relu6)]
        for t, c, n, s in MOBILENET_V2_SETTING:
            cout = make_divisible(c)
            for i in range(n):
                features.append(InvertedResidual(cin, cout, s if i == 0 else 1, t))
                cin = cout
        features.append(_conv_bn_act(cin, last, 1, act=_relu6))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(last, num_classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


def build_mobilenet_v2(*, num_classes: int, channels: int, **_) -> nn.Module:
    return MobileNetV2(num_classes=num_classes, channels=channels)


class SqueezeExcitation(nn.Module):
    def __init__(self, cin: int, squeeze: int):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(cin, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, cin, 1)
        self.activation = nn.SiLU(inplace=True)
        self.scale_activation = nn.Sigmoid()

    def forward(self, x):
        scale = self.scale_activation(self.fc2(self.activation(self.fc1(self.avgpool(x)))))
        return scale * x


class StochasticDepth(nn.Module):
    """torchvision.ops.StochasticDepth(p, 'row'): drop the whole residual branch per sample in training."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        survival = 1.0 - self.p
        noise = torch.empty((x.shape[0],) + (1,) * (x.ndim - 1), dtype=x.dtype, device=x.device)
        return x * noise.bernoulli_(survival).div_(survival)


class MBConv(nn.Module):
    """EfficientNet block: 1x1 expand, kxk depthwise, squeeze-excitation, 1x1 project, residual."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand_ratio: int, sd_prob: float):
        super().__init__()
        self.use_res_connect = stride == 1 and cin == cout
        expanded = make_divisible(cin * expand_ratio)
        layers: list[nn.Module] = []
        if expanded != cin:
            layers.append(_conv_bn_act(cin, expanded, 1, act=_silu))
        layers += [
            _conv_bn_act(expanded, expanded, kernel, stride, groups=expanded, act=_silu),
            SqueezeExcitation(expanded, max(1, cin // 4)),
            _conv_bn_act(expanded, cout, 1, act=None),
        ]
        self.block = nn.Sequential(*layers)
        self.stochastic_depth = StochasticDepth(sd_prob)

    def forward(self, x):
        out = self.block(x)
        return self.stochastic_depth(out) + x if self.use_res_connect else out


class EfficientNet(nn.Module):
    def __init__(
        self, width_mult: float, depth_mult: float, dropout: float, num_classes: int = 1000, channels: int = 3
    ):
        super().__init__()
        blocks = efficientnet_blocks(width_mult, depth_mult)
        features: list[nn.Module] = [_conv_bn_act(channels, blocks[0][4], 3, 2, act=_silu)]
        stages: list[list[nn.Module]] = []
        for stage, e, k, s, cin, cout, sd in blocks:
            if stage == len(stages):
                stages.append([])
            stages[stage].append(MBConv(cin, cout, k, s, e, sd))
        features += [nn.Sequential(*st) for st in stages]
        last_in = blocks[-1][5]
        features.append(_conv_bn_act(last_in, 4 * last_in, 1, act=_silu))
        self.features = nn.Sequential(*features)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Dropout(dropout, inplace=True), nn.Linear(4 * last_in, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def build_efficientnet_b4(*, num_classes: int, channels: int, **_) -> nn.Module:
    return EfficientNet(**EFFICIENTNET_B4, num_classes=num_classes, channels=channels)
