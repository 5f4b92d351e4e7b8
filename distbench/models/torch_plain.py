"""Plain feed-forward networks (no skip connections) in PyTorch: VGG-16, and the two small probes
'linear' and 'mlp', and converge's small 'cnn'. keras_plain.py holds the same networks.

VGG's module names follow torchvision (`features.N`, `classifier.N`) so state_dict keys line up.
"""

from __future__ import annotations

import torch
from torch import nn

from distbench.models.specs import CNN_CHANNELS, CNN_SIDE, MLP_HIDDEN, VGG16_CFG


class VGG(nn.Module):
    def __init__(self, cfg=VGG16_CFG, num_classes: int = 1000, channels: int = 3, dropout: float = 0.5):
        super().__init__()
        layers: list[nn.Module] = []
        cin = channels
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(cin, v, 3, 1, 1), nn.ReLU(inplace=True)]
                cin = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(cin * 7 * 7, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(4096, 4096),
            nn.ReLU(inplace=True),
            nn.Dropout(dropout),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


def build_vgg16(*, num_classes: int, channels: int, **_) -> nn.Module:
    return VGG(num_classes=num_classes, channels=channels)


def build_linear(*, num_classes: int, channels: int, **_) -> nn.Module:
    """Global average pooling, then one linear layer: gradients of a few bytes (spec 'linear')."""
    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, num_classes))


def build_mlp(*, num_classes: int, channels: int, image_size: int | None, **_) -> nn.Module:
    """Flatten, one hidden ReLU layer, the classifier (spec 'mlp'); Glorot-uniform weights and zero biases,
    Keras' Dense defaults, so both frameworks start from the same init scheme."""
    side = image_size or 8
    model = nn.Sequential(
        nn.Flatten(), nn.Linear(channels * side * side, MLP_HIDDEN), nn.ReLU(), nn.Linear(MLP_HIDDEN, num_classes)
    )
    for m in model:
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def build_cnn(*, num_classes: int, channels: int, image_size: int | None, **_) -> nn.Module:
    """Two 3x3 convolutions (ReLU, 2x2 max pool each), a linear classifier on the flattened map (spec 'cnn');
    Glorot-uniform weights and zero biases, Keras' defaults, as build_mlp."""
    side = (image_size or CNN_SIDE) // 4
    c1, c2 = CNN_CHANNELS
    model = nn.Sequential(
        nn.Conv2d(channels, c1, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(c2 * side * side, num_classes),
    )
    for m in model:
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    return model
