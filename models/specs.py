"""Framework-free model facts: input shapes, loss kind and reference parameter counts."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    name: str
    """Registry key, as typed on the command line."""
    description: str
    kind: str
    """'image' (NCHW in torch, NHWC in Keras) for now."""
    default_image_size: int
    """Side of the square input the reference network is defined at."""
    min_image_size: int
    """Smallest side the network's downsampling accepts (the final feature map is at least 1x1)."""
    channels: int = 3
    num_classes: int = 1000
    reference_params: int
    """Parameter count of the torchvision reference at 1000 classes; both frameworks must match it."""


MODEL_SPECS: dict[str, ModelSpec] = {
    "resnet18": ModelSpec(
        name="resnet18", description="ResNet-18 (basic blocks)", kind="image",
        default_image_size=224, min_image_size=32, reference_params=11_689_512),
    "resnet50": ModelSpec(
        name="resnet50", description="ResNet-50 v1.5 (stride in the 3x3 conv)", kind="image",
        default_image_size=224, min_image_size=32, reference_params=25_557_032),
    "resnet152": ModelSpec(
        name="resnet152", description="ResNet-152 v1.5", kind="image",
        default_image_size=224, min_image_size=32, reference_params=60_192_808),
}


def model_names() -> list[str]:
    return sorted(MODEL_SPECS)


def get_spec(name: str) -> ModelSpec:
    try:
        return MODEL_SPECS[name]
    except KeyError:
        raise ValueError(
            f"unknown model {name!r}; valid models: {', '.join(model_names())}") from None
