"""A test-only builder for a model card: `arch = "effnet_card_builder:efficientnet_lite0"`."""
from torch import nn


def efficientnet_lite0() -> nn.Module:
    from efficientnet_lite_pytorch import EfficientNet

    return EfficientNet.from_name("efficientnet-lite0")
