"""PyTorch definitions. Layer for layer the same as keras_models.py (torchvision's structure).

Module names follow torchvision (vgg16, mobilenet_v2, efficientnet_b4: `features.N...`,
`classifier.N`) so state_dict keys line up with torchvision's; weight initialisation is torch's
default (it does not change shapes, parameter counts or step cost).
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from distbench.models.specs import (
    BERT_BASE,
    LSTM_LM,
    MLP_HIDDEN,
    MOBILENET_V2_SETTING,
    UNET,
    VGG16_CFG,
    ModelSpec,
    check_input,
    efficientnet_blocks,
    make_divisible,
    output_size,
    registered_spec,
)

# (block kind, blocks per stage)
_RESNET_LAYOUTS = {
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet152": ("bottleneck", (3, 8, 36, 3)),
}


def _bn(c: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(c, eps=1e-5, momentum=0.1)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False)
        self.bn1 = _bn(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = _bn(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _bn(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = _bn(width)
        # v1.5: the stride sits in the 3x3 conv.
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = _bn(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = _bn(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _bn(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    def __init__(self, block: type, layers: tuple[int, ...], num_classes: int = 1000, channels: int = 3):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, 64, 7, 2, 3, bias=False)
        self.bn1 = _bn(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages = []
        cin = 64
        for i, n in enumerate(layers):
            width = 64 * 2**i
            blocks = []
            for j in range(n):
                blocks.append(block(cin, width, 2 if (j == 0 and i > 0) else 1))
                cin = width * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def _resnet(name: str):
    kind, layers = _RESNET_LAYOUTS[name]
    block = BasicBlock if kind == "basic" else Bottleneck

    def build(*, num_classes: int, channels: int, **_) -> nn.Module:
        return ResNet(block, layers, num_classes=num_classes, channels=channels)

    return build


# ---- VGG-16 -------------------------------------------------------------------------------------


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


def _vgg16(*, num_classes: int, channels: int, **_) -> nn.Module:
    return VGG(num_classes=num_classes, channels=channels)


# ---- MobileNetV2 / EfficientNet shared pieces ---------------------------------------------------


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


def _mobilenet_v2(*, num_classes: int, channels: int, **_) -> nn.Module:
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


def _efficientnet_b4(*, num_classes: int, channels: int, **_) -> nn.Module:
    return EfficientNet(1.4, 1.8, 0.4, num_classes=num_classes, channels=channels)


# ---- SLEAP UNet ---------------------------------------------------------------------------------


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


def _unet(*, num_classes: int, channels: int, **_) -> nn.Module:
    cfg = {k: v for k, v in UNET.items() if k != "maps"}
    return UNet(channels=channels, maps=num_classes, **cfg)


# ---- BERT-base ----------------------------------------------------------------------------------


class BertEmbeddings(nn.Module):
    def __init__(self, vocab: int, hidden: int, max_positions: int, type_vocab: int, dropout: float, eps: float):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_positions, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids):
        # Single-segment input: every token type is 0.
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = (
            self.word_embeddings(ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(torch.zeros_like(ids))
        )
        return self.dropout(self.LayerNorm(x))


class BertLayer(nn.Module):
    """Post-LN encoder layer: separate q/k/v/out projections with biases (Keras MultiHeadAttention's
    weights), attention-prob dropout, GELU (erf) FFN. No attention mask: the batches have no padding."""

    def __init__(self, hidden: int, heads: int, intermediate: int, dropout: float, eps: float):
        super().__init__()
        self.heads, self.attn_dropout = heads, dropout
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.act = nn.GELU()
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=eps)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        n, s, h = x.shape

        def heads(t):
            return t.view(n, s, self.heads, h // self.heads).transpose(1, 2)

        a = F.scaled_dot_product_attention(
            heads(self.query(x)),
            heads(self.key(x)),
            heads(self.value(x)),
            dropout_p=self.attn_dropout if self.training else 0.0,
        )
        a = a.transpose(1, 2).reshape(n, s, h)
        x = self.attention_norm(x + self.dropout(self.attention_output(a)))
        return self.output_norm(x + self.dropout(self.output(self.act(self.intermediate(x)))))


class BertClassifier(nn.Module):
    def __init__(
        self,
        num_classes: int = 2,
        layers: int = 12,
        hidden: int = 768,
        heads: int = 12,
        intermediate: int = 3072,
        vocab: int = 30522,
        max_positions: int = 512,
        type_vocab: int = 2,
        dropout: float = 0.1,
        layer_norm_eps: float = 1e-12,
    ):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, hidden, max_positions, type_vocab, dropout, layer_norm_eps)
        self.encoder = nn.Sequential(
            *[BertLayer(hidden, heads, intermediate, dropout, layer_norm_eps) for _ in range(layers)]
        )
        self.pooler = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())
        self.classifier = nn.Sequential(nn.Dropout(dropout), nn.Linear(hidden, num_classes))

    def forward(self, ids):
        x = self.encoder(self.embeddings(ids))
        return self.classifier(self.pooler(x[:, 0]))


def _bert_base(*, num_classes: int, **_) -> nn.Module:
    return BertClassifier(num_classes=num_classes, **BERT_BASE)


# ---- LSTM language model ------------------------------------------------------------------------


class LSTMLanguageModel(nn.Module):
    """Embedding -> dropout -> [LSTM -> dropout] x layers -> Linear to the vocabulary, per token.

    One nn.LSTM per layer (Keras has one layer per LSTM); each has torch's two bias vectors
    (bias_ih, bias_hh), which keras_models' TorchLSTM reproduces.
    """

    def __init__(self, vocab: int = 10000, embed: int = 650, hidden: int = 650, layers: int = 2, dropout: float = 0.5):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.lstms = nn.ModuleList(
            [nn.LSTM(embed if i == 0 else hidden, hidden, batch_first=True) for i in range(layers)]
        )
        self.dropout = nn.Dropout(dropout)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, ids):
        x = self.dropout(self.embedding(ids))
        for lstm in self.lstms:
            x = self.dropout(lstm(x)[0])
        return self.decoder(x)  # (N, seq, vocab) logits


def _lstm(**_) -> nn.Module:
    return LSTMLanguageModel(**LSTM_LM)


def _linear(*, num_classes: int, channels: int, **_) -> nn.Module:
    """Global average pooling, then one linear layer: gradients of a few bytes (spec 'linear')."""
    return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, num_classes))


def _mlp(*, num_classes: int, channels: int, image_size: int | None, **_) -> nn.Module:
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


MODELS = {name: _resnet(name) for name in _RESNET_LAYOUTS}
MODELS.update(
    {
        "vgg16": _vgg16,
        "mobilenet_v2": _mobilenet_v2,
        "efficientnet_b4": _efficientnet_b4,
        "unet": _unet,
        "bert_base": _bert_base,
        "lstm": _lstm,
        "linear": _linear,
        "mlp": _mlp,
    }
)


def _spec(name: str) -> ModelSpec:
    return registered_spec(name, MODELS)


def build_model(
    name: str, *, num_classes: int | None = None, image_size: int | None = None, seq_len: int | None = None
) -> nn.Module:
    """The named network on the CPU, in training mode.

    num_classes: classification head size (image models and bert_base); None = the spec's
    default (1000, bert_base 2). unet always outputs its 13 maps and lstm the vocabulary.
    image_size / seq_len are only validated (check_input): torch modules take any valid size.
    """
    spec = _spec(name)
    check_input(spec, image_size=image_size, seq_len=seq_len)
    return MODELS[name](
        num_classes=output_size(spec, num_classes), channels=spec.channels, image_size=image_size, seq_len=seq_len
    )


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def confidence_maps(points: torch.Tensor, height: int, width: int, stride: int, sigma: float = 1.5) -> torch.Tensor:
    """SLEAP's make_confmaps: Gaussians (peak 1) at points (N, K, 2 as x, y, input pixels) on the
    grid 0, stride, 2*stride, ... -> (N, K, height // stride, width // stride)."""
    xv = torch.arange(0, width, stride, dtype=torch.float32)
    yv = torch.arange(0, height, stride, dtype=torch.float32)
    dx = (xv[None, None, None, :] - points[..., 0, None, None]) ** 2
    dy = (yv[None, None, :, None] - points[..., 1, None, None]) ** 2
    return torch.exp(-(dx + dy) / (2 * sigma**2))


def synthetic_batch(
    name: str,
    batch: int,
    *,
    image_size: int | None = None,
    seq_len: int | None = None,
    num_classes: int | None = None,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) on the CPU, deterministic in seed.

    image: x (N, C, H, W) float32 ~ N(0, 1), y (N,) int64 class ids.
    keypoints: x (N, 1, H, W) float32 in [0, 1), y (N, 13, H/2, W/2) Gaussian confidence maps
    (sigma 1.5 px) at random keypoints. tokens: x (N, seq) int64 ids; y (N,) class ids
    (bert_base) or (N, seq) next-token ids (lstm: x and y are one sequence shifted by one).
    """
    spec = _spec(name)
    check_input(spec, image_size=image_size, seq_len=seq_len)
    g = torch.Generator(device="cpu").manual_seed(seed)
    if spec.kind == "tokens":
        seq = seq_len or spec.default_seq_len
        if spec.loss == "lm_cross_entropy":
            ids = torch.randint(0, spec.vocab_size, (batch, seq + 1), generator=g)
            return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
        x = torch.randint(0, spec.vocab_size, (batch, seq), generator=g)
        return x, torch.randint(0, output_size(spec, num_classes), (batch,), generator=g)
    side = image_size or spec.default_image_size
    if spec.kind == "keypoints":
        x = torch.rand(batch, spec.channels, side, side, generator=g)
        points = torch.rand(batch, spec.num_classes, 2, generator=g) * (side - 1)
        return x, confidence_maps(points, side, side, spec.output_stride)
    x = torch.randn(batch, spec.channels, side, side, generator=g)
    return x, torch.randint(0, output_size(spec, num_classes), (batch,), generator=g)


def loss_fn(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """(outputs, targets) -> scalar mean loss: CrossEntropyLoss, MSELoss, or cross entropy over
    every token for the LM (outputs (N, seq, V) flattened to (N*seq, V))."""
    spec = _spec(name)
    if spec.loss == "mse":
        return nn.MSELoss()
    if spec.loss == "lm_cross_entropy":
        ce = nn.CrossEntropyLoss()

        def lm_loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            return ce(outputs.reshape(-1, outputs.shape[-1]), targets.reshape(-1))

        return lm_loss
    return nn.CrossEntropyLoss()


@functools.lru_cache(maxsize=None)
def forward_flops_per_sample(
    name: str, image_size: int | None = None, seq_len: int | None = None, num_classes: int | None = None
) -> int:
    """Forward FLOPs of one sample at the given (default: the spec's) input size and head size.

    Measured with torch.utils.flop_counter.FlopCounterMode on a batch of 1; a multiply-add counts
    as 2 FLOPs, and only matmuls, convolutions and attention are counted (elementwise ops, norms,
    pooling and softmax are not). The model and input live on the 'meta' device: nothing is
    allocated or computed, and ops that CPU kernels would fuse out of the counter's sight
    (CPU flash attention, the fused LSTM) decompose into countable matmuls. Cached per arguments.
    """
    from torch.utils.flop_counter import FlopCounterMode

    spec = _spec(name)
    check_input(spec, image_size=image_size, seq_len=seq_len)
    with torch.device("meta"):
        model = build_model(name, num_classes=num_classes).eval()
        if spec.kind == "tokens":
            x = torch.zeros(1, seq_len or spec.default_seq_len, dtype=torch.long)
        else:
            side = image_size or spec.default_image_size
            x = torch.zeros(1, spec.channels, side, side)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(x)
    return int(counter.get_total_flops())
