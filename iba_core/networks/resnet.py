"""ResNet-50 (torchvision, IMAGENET1K_V1): the paper's main network.

Layers use He et al.'s names: `conv1` is the stem output (conv, BN, ReLU), `conv{g}_{i}` the i-th
bottleneck block of group g (the max-pool counts to conv2_1).
"""
from __future__ import annotations

from torch import nn

from .canonizers import exact_sequential_merge
from .spec import LOGITS, Flatten, NetworkSpec, Stages, WeightsSource
from .torchvision_common import imagenet_categories, torchvision_builder, torchvision_with_classes

_BLOCKS = {2: 3, 3: 4, 4: 6, 5: 3}


def resnet50_stages(m: nn.Module) -> Stages:
    stages: Stages = [("conv1", nn.Sequential(m.conv1, m.bn1, m.relu))]
    first = True
    for group, layer in zip((2, 3, 4, 5), (m.layer1, m.layer2, m.layer3, m.layer4)):
        for i, block in enumerate(layer):
            mod = nn.Sequential(m.maxpool, block) if first else block
            first = False
            stages.append((f"conv{group}_{i + 1}", mod))
    stages.append((None, nn.Sequential(m.avgpool, Flatten(), m.fc)))
    return stages


def resnet_canonizers(model: nn.Module) -> list:
    """zennit's ResNet canonizer parts (BatchNorms merged, residual sums as explicit Sum modules), exact merge."""
    from zennit.torchvision import ResNetBasicBlockCanonizer, ResNetBottleneckCanonizer

    return [exact_sequential_merge(), ResNetBottleneckCanonizer(), ResNetBasicBlockCanonizer()]


SPEC = NetworkSpec(
    key="resnet50",
    title="ResNet-50 (torchvision IMAGENET1K_V1)",
    build=torchvision_builder("resnet50"),
    with_classes=torchvision_with_classes("resnet50"),
    layers=("conv1",) + tuple(f"conv{g}_{i}" for g, n in _BLOCKS.items() for i in range(1, n + 1)),
    default_layer="conv3_4",  # paper Appendix, Table "Hyperparameters for Per-Sample Bottleneck"
    weights=WeightsSource("resnet50-0676ba61.pth", "https://download.pytorch.org/models/resnet50-0676ba61.pth"),
    categories=imagenet_categories,
    stages=resnet50_stages,
    hook_modules={"conv1": "relu", **{f"conv{g}_{i}": f"layer{g - 1}.{i - 1}"
                                      for g, n in _BLOCKS.items() for i in range(1, n + 1)}},
    # Grad-CAM: layer4's output, the last bottleneck block (conv5_3, 7×7 at 224 px).
    cam_layer=("layer4", False),
    canonizers=resnet_canonizers,
    # paper Appendix, Table "Hyperparameters for the Readout Bottleneck"
    readout_layer="conv2_3",
    readout_reads=("conv2_3", "conv3_4", "conv4_6", "conv5_3", LOGITS),
    note="The paper's main network.",
)
