"""The layers a person would pick in a timm or Hugging Face network: its stem, stages and blocks.

A dry forward pass (`spec.find_layers`) finds every module whose output lies on the image: hundreds in a modern
network (each convolution, norm, activation and projection). The ones a person reads are the network's blocks,
the items of a repeated list: a `ModuleList` or `Sequential` whose children are all composite modules of one
class (timm ResNet's `layer2.0`, `layer2.1`; ViT's `blocks.5`; Hugging Face's `vit.layers.5`,
`convnext.encoder.stages.2`). A list of mixed modules (a stem `Sequential(conv, norm)`, a downsampling pair) is
no list of blocks, and a list inside a block is the block's inside (two levels at most: stages and their blocks).
The source adds the modules it names itself (`named`: timm's `feature_info`, the stem and each stage's output;
Hugging Face's embeddings). A stage returns its last block's output unchanged (the same
tensor object): that layer is listed once, under the stage's name, so a ResNet lists `layer1` and not also
`layer1.1`.
"""
from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from ..model_state import frozen_eval, layer_tensor, with_layer_tensor


def repeated_blocks(model: nn.Module) -> list[str]:
    """Dotted names of the items of every list of blocks in `model` (see the module docstring), in module order."""
    names = []
    for name, module in model.named_modules():
        if not isinstance(module, (nn.ModuleList, nn.Sequential)):
            continue
        children = list(module.named_children())
        if not children or len({type(child) for _, child in children}) != 1:
            continue
        if next(children[0][1].children(), None) is None:  # leaves (a Sequential of convolutions): not blocks
            continue
        names += [f"{name}.{child}" if name else child for child, _ in children]
    return names


def block_layers(model: nn.Module, input_size: int, named: Iterable[str] = (), channels: int = 3) -> list[str]:
    """The blocks of `model` and the modules in `named` that exist, without a block whose output is its stage's
    (one dry forward pass at `input_size` with `channels` input channels, eval mode, the model's flags restored).
    Layers whose output is not a map or tokens on a grid are dropped later by `spec.derive_spec`."""
    modules = dict(model.named_modules())
    found = list(dict.fromkeys([n for n in named if n in modules] + repeated_blocks(model)))
    # Two levels at most: stages and their blocks. A list inside a block (transformers ResNet's three conv layers
    # in each bottleneck) is the block's inside, not a layer a person picks.
    candidates = [name for name in found if sum(name.startswith(other + ".") for other in found) < 2]
    outputs: dict[str, object] = {}  # the first output of each candidate, kept alive so identities stay unique

    def hook(name: str):
        def record(_m, _inp, out) -> None:
            outputs.setdefault(name, layer_tensor(out))

        return record

    handles = [modules[name].register_forward_hook(hook(name)) for name in candidates]
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    try:
        with frozen_eval(model), torch.no_grad():
            model(torch.zeros(1, channels, input_size, input_size, device=device))
    finally:
        for handle in handles:
            handle.remove()
    kept = []
    for name in candidates:
        out = outputs.get(name)
        same_as_outer = any(other != name and name.startswith(other + ".") and outputs.get(other) is out
                            for other in candidates)
        if out is not None and not same_as_outer:
            kept.append(name)
    return kept


def reaches_output(model: nn.Module, name: str, input_size: int, channels: int = 3) -> bool:
    """Whether the output of module `name` reaches `model`'s output: one forward pass (eval mode, no parameter
    gradients) with that output swapped for a leaf that requires gradients. False for a layer whose output the
    network does not use (PiT's last stage map: its head reads a class token carried past it) or that gives no
    tensor."""
    module = model.get_submodule(name)
    seen: list[bool] = []

    def swap(_m, _inp, out):
        t = layer_tensor(out)
        seen.append(t is not None)
        # a copy of the leaf runs on: an in-place operation after the layer (DenseNet's ReLU) may change it
        return None if t is None else with_layer_tensor(out, t.detach().requires_grad_(True).clone())

    handle = module.register_forward_hook(swap)
    param = next(model.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    try:
        with frozen_eval(model), torch.enable_grad():
            out = layer_tensor(model(torch.zeros(1, channels, input_size, input_size, device=device)))
    except RuntimeError:  # the network cannot run on with that layer swapped: not a layer to read a CAM at
        return False
    finally:
        handle.remove()
    return any(seen) and out is not None and out.requires_grad
