"""The network at the concept layer: its activations as a grid map (`LayerPass.read`), and the class probabilities
when that layer's output is replaced (`LayerPass.probabilities_with`: the causal check of a concept).

The layer's output is read in its own layout (`networks.tokens.FeatureLayout`: a CNN map, or transformer tokens on
a patch grid whose unlocated tokens — a ViT's class token — are kept aside and passed on unchanged). The rest of the
network runs from a changed output through the split the bottleneck uses (`Network.split_path`: a registered stage
list or a torch.fx cut, the prefix once), else through a forward hook that swaps the layer's output during a whole
pass (`model_state.replaced_output`, removed also on error).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

#: The most rows (image variants) one pass of the network's rest takes.
PASS_ROWS = 64


@dataclass
class Read:
    """A batch's activations at the layer: the grid map (n, C, h, w) and the unlocated tokens (or None)."""

    grid: torch.Tensor
    extra: torch.Tensor | None


class LayerPass:
    """One network and layer: `read` the layer's grid, run the rest from a changed grid."""

    def __init__(self, network, layer: str):
        from ..feature_stats import layer_outputs

        self.network, self.layer = network, layer
        self.layout = network.layout(layer)
        self.path = network.split_path(layer)
        if self.path == "stages":
            self.suffix = network.fast_split(layer)[1]
        elif self.path == "fx":
            self.suffix = network.fx_split(layer)[1]
        else:
            self.suffix = None
        self._outputs = layer_outputs(network, [layer])

    @property
    def device(self) -> torch.device:
        return self.network.device

    def read(self, x: torch.Tensor) -> Read:
        """The layer's activations for a batch of preprocessed images (float32, on the network's device)."""
        from ..model_state import frozen_eval

        with frozen_eval(self.network.model), torch.no_grad():
            out = self._outputs(x.to(self.device))[self.layer].float()
        grid, extra = self.layout.to_map(out)
        return Read(grid.contiguous(), None if extra is None else extra.contiguous())

    def _logits(self, x: torch.Tensor, grid: torch.Tensor, extra: torch.Tensor | None) -> torch.Tensor:
        """Logits of the network whose layer output is `grid` (+ `extra`); x: the images (the hook path runs them)."""
        from ..model_state import replaced_output

        output = self.layout.from_map(grid, extra)
        if self.suffix is not None:
            if self.layout.kind == "map":
                output = output.contiguous(memory_format=torch.channels_last)
            return self.suffix(output)
        with replaced_output(self.network.hook_module(self.layer), lambda original: output.to(original.dtype)):
            return self.network.model(x)

    def probabilities_with(self, x: torch.Tensor, grids: torch.Tensor, extra: torch.Tensor | None,
                           targets: torch.Tensor) -> torch.Tensor:
        """p(target) for each row of `grids` (m, C, h, w), the layer's grid replaced by it; x (m, …) and extra
        (m, …, or None) row by row with it; at most PASS_ROWS rows a pass."""
        from ..heads import probabilities
        from ..model_state import frozen_eval

        out = []
        with frozen_eval(self.network.model), torch.no_grad():
            for start in range(0, len(grids), PASS_ROWS):
                part = slice(start, start + PASS_ROWS)
                logits = self._logits(x[part].to(self.device), grids[part],
                                      None if extra is None else extra[part])
                p = probabilities(logits.float(), self.network.head)
                out.append(p.gather(1, targets[part].to(p.device)[:, None])[:, 0])
        return torch.cat(out) if out else torch.zeros(0)
