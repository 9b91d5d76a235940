"""What the torchvision-built specs share: building a model by name, ImageNet class names."""
from __future__ import annotations

from typing import Callable

from torch import nn


def torchvision_builder(name: str) -> Callable[[dict | None], nn.Module]:
    """A builder for torchvision.models.<name> (random init, then the state dict if given)."""

    def build(state_dict: dict | None) -> nn.Module:
        import torchvision

        model = getattr(torchvision.models, name)(weights=None)
        if state_dict is not None:
            model.load_state_dict(state_dict)
        return model

    return build


def torchvision_with_classes(name: str) -> Callable[[int], nn.Module]:
    """torchvision.models.<name> with an untrained head of n outputs (random init): a card's own fine-tuned head."""

    def build(num_classes: int) -> nn.Module:
        import torchvision

        return getattr(torchvision.models, name)(weights=None, num_classes=num_classes)

    return build


def imagenet_categories() -> list[str]:
    """The 1000 ImageNet class names in index order (carried by torchvision's weights metadata)."""
    from torchvision.models import ResNet50_Weights

    return list(ResNet50_Weights.IMAGENET1K_V1.meta["categories"])
