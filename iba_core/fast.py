"""Faster copies of a network part for the many suffix passes of the Per-Sample Bottleneck.

In eval mode a BatchNorm after a convolution is an affine map, so it can be folded into the
convolution's weights. That saves a full read and write of every activation, forward and backward.
The folded convolutions are new modules (stored channels_last, which oneDNN and cuDNN run faster);
every other module is shared with the original, which is never modified.
"""
from __future__ import annotations

import torch
from torch import fx, nn
from torch.nn.utils.fusion import fuse_conv_bn_eval


class _ConvLeafTracer(fx.Tracer):
    """Keeps every Conv2d subclass (e.g. "same"-padding convs of ported TF models) as one module."""

    def is_leaf_module(self, m: nn.Module, qualname: str) -> bool:
        return isinstance(m, (nn.Conv2d, nn.BatchNorm2d)) or super().is_leaf_module(m, qualname)


def fold_batchnorms(module: nn.Module) -> nn.Module:
    """A module computing the same function with conv→BN pairs folded; the input is left untouched.

    Falls back to `module` itself when it cannot be traced symbolically.
    """
    try:
        gm = fx.GraphModule(module, _ConvLeafTracer().trace(module), module.__class__.__name__)
    except Exception:  # data-dependent control flow: not worth failing over a speed-up
        return module
    modules = dict(gm.named_modules())
    folded = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_module" or not isinstance(modules.get(node.target), nn.BatchNorm2d):
            continue
        src = node.args[0]
        if not (isinstance(src, fx.Node) and src.op == "call_module" and len(src.users) == 1):
            continue
        conv, bn = modules.get(src.target), modules[node.target]
        if not isinstance(conv, nn.Conv2d) or bn.training or conv.training or not bn.track_running_stats:
            continue
        fused = fuse_conv_bn_eval(conv, bn).to(memory_format=torch.channels_last)
        for p in fused.parameters():
            p.requires_grad_(False)
        name = f"folded_{folded}"
        gm.add_submodule(name, fused)
        folded += 1
        with gm.graph.inserting_after(src):
            new = gm.graph.call_module(name, src.args, src.kwargs)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        gm.graph.erase_node(src)
    if not folded:
        return module
    gm.graph.lint()
    gm.recompile()
    gm.delete_all_unused_submodules()
    return gm.eval()
