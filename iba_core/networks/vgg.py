"""VGG-16 (torchvision, IMAGENET1K_V1): the paper's second network.

Each named layer ends at a convolution's output, before its ReLU (the paper's VGG layers).
"""
from __future__ import annotations

from torch import nn

from .spec import LOGITS, Flatten, NetworkSpec, Stages, WeightsSource
from .torchvision_common import imagenet_categories, torchvision_builder, torchvision_with_classes

CONV_NAMES = (
    "conv1_1", "conv1_2", "conv2_1", "conv2_2", "conv3_1", "conv3_2", "conv3_3",
    "conv4_1", "conv4_2", "conv4_3", "conv5_1", "conv5_2", "conv5_3",
)
#: Index of each convolution in torchvision's `features`.
_CONV_INDEX = (0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28)


def vgg16_stages(m: nn.Module) -> Stages:
    stages: Stages = []
    pending: list[nn.Module] = []
    names = iter(CONV_NAMES)
    for mod in m.features:
        pending.append(mod)
        if isinstance(mod, nn.Conv2d):
            stages.append((next(names), nn.Sequential(*pending)))
            pending = []
    stages.append((None, nn.Sequential(*pending, m.avgpool, Flatten(), m.classifier)))
    return stages


def vgg_canonizers(model: nn.Module) -> list:
    from zennit.torchvision import VGGCanonizer

    return [VGGCanonizer()]  # VGG-16 has no BatchNorm: nothing to merge


SPEC = NetworkSpec(
    key="vgg16",
    title="VGG-16 (torchvision IMAGENET1K_V1)",
    build=torchvision_builder("vgg16"),
    with_classes=torchvision_with_classes("vgg16"),
    layers=CONV_NAMES,
    default_layer="conv4_1",  # paper Appendix, Table "Hyperparameters for Per-Sample Bottleneck"
    weights=WeightsSource("vgg16-397923af.pth", "https://download.pytorch.org/models/vgg16-397923af.pth"),
    categories=imagenet_categories,
    stages=vgg16_stages,
    hook_modules={n: f"features.{i}" for n, i in zip(CONV_NAMES, _CONV_INDEX)},
    # Grad-CAM: features.30, the last feature layer (pool5, 7×7), as the IBA authors' code did (Selvaraju et
    # al. take relu5_3, 14×14, before that max-pool; docs/science/fidelity.md).
    cam_layer=("features.30", False),
    canonizers=vgg_canonizers,
    # paper Appendix, Table "Hyperparameters for the Readout Bottleneck"
    readout_layer="conv3_1",
    readout_reads=("conv3_1", "conv4_1", "conv5_1", "conv5_3", LOGITS),
    note="The paper's second network.",
)
