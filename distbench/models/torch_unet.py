"""SLEAP's UNet with a confidence-map head, in PyTorch (keras_unet.py is the same network)."""

from __future__ import annotations

import torch
from torch import nn

from distbench.models.specs import UNET


def _unet_convs(cin: int, cout: int, n: int, kernel: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(n):
        layers += [nn.Conv2d(cin if i == 0 else cout, cout, kernel, 1, (kernel - 1) // 2), nn.ReLU(inplace=True)]
    return nn.Sequential(*layers)


class UNet(nn.Module):
    """SLEAP's UNet (sleap.nn.architectures.unet, as configured in the seed) + confidence-map head.

    Encoder block i (i = 0..3): [2x2 max pool if i > 0] then 2x (conv3x3 + bias, ReLU), filters
    int(32 * 1.5**i) = 32, 48, 72, 108; the block output is the skip source at its stride. A final
    pool takes it to stride 16; the middle block is conv 108->162 (expand) and conv 162->162
    (no block contraction). Decoder block j (j = 0..2): bilinear 2x upsampling, concat
    [skip, x], 2x (conv3x3, ReLU) to int(32 * 1.5**(3-j)) = 108, 72, 48, ending at stride 2. Head:
    1x1 conv to 13 maps, linear. No batch norm (SLEAP's default). 'same' padding everywhere;
    with the side a multiple of 16 the pools never pad, so torch's MaxPool2d(2) is SLEAP's.
    """

    def __init__(
        self,
        channels: int = 1,
        maps: int = 13,
        filters: int = 32,
        filters_rate: float = 1.5,
        down_blocks: int = 4,
        up_blocks: int = 3,
        convs_per_block: int = 2,
        kernel_size: int = 3,
        middle_block: bool = True,
    ):
        super().__init__()

        def unet_filters(level: int) -> int:
            return int(filters * filters_rate**level)

        self.down = nn.ModuleList()
        cin = channels
        for i in range(down_blocks):
            f = unet_filters(i)
            self.down.append(_unet_convs(cin, f, convs_per_block, kernel_size))
            cin = f
        self.pool = nn.MaxPool2d(2, 2)
        self.middle = None
        if middle_block:
            f = unet_filters(down_blocks)
            self.middle = nn.Sequential(
                _unet_convs(cin, f, convs_per_block - 1, kernel_size), _unet_convs(f, f, 1, kernel_size)
            )
            cin = f
        self.upsample = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.up = nn.ModuleList()
        for j in range(up_blocks):
            f = unet_filters(down_blocks - 1 - j)
            self.up.append(_unet_convs(cin + f, f, convs_per_block, kernel_size))  # skip has f channels
            cin = f
        self.head = nn.Conv2d(cin, maps, 1)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.down):
            x = block(x if i == 0 else self.pool(x))
            skips.append(x)
        x = self.pool(x)
        if self.middle is not None:
            x = self.middle(x)
        for block in self.up:
            x = block(torch.cat([skips.pop(), self.upsample(x)], dim=1))
        return self.head(x)


def build_unet(*, num_classes: int, channels: int, **_) -> nn.Module:
    cfg = {k: v for k, v in UNET.items() if k != "maps"}
    return UNet(channels=channels, maps=num_classes, **cfg)
