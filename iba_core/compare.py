"""Run several attribution methods on one image.

    >>> maps = compare(network, x, target=285, methods=["saliency", "grad_cam", "iba_10"],
    ...                progress=lambda done, total, name: print(done, total, name))
    >>> png = iba_core.render.grid_png(maps, cropped_image)

`compare` returns one `AttributionMap` per method (the methods' common result type), in the order asked;
`iba_core.render.grid_png` draws them side by side. `compare_target_note` says when the network hardly
predicts the class the maps explain.
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch

from .heads import head_of, probabilities
from .methods import AttributionMap, Method, resolve_methods
from .per_sample import target_note
from .progress import ProgressFn

#: on_error(key, error): called for a failing method, which is then skipped; without it errors propagate.
ErrorFn = Callable[[str, BaseException], None]


def compare(
    network,
    x: torch.Tensor,
    target: int | None = None,
    methods: str | Iterable[str | Method] | None = "all",
    *,
    settings: dict[str, dict] | None = None,
    progress: ProgressFn | None = None,
    on_error: ErrorFn | None = None,
) -> list[AttributionMap]:
    """Run `methods` on the preprocessed image x (1, 3, H, W) for class `target` (None: top-1).

    settings: per-key overrides, e.g. {"integrated_gradients": {"steps": 16}}.
    progress (`iba_core.progress.ProgressFn`): called before each method (done = methods finished so far, label =
    the method about to run) and once at the end (done == total, label "done").
    """
    chosen = resolve_methods(methods, settings)
    if methods is None or (isinstance(methods, str) and methods.strip() == "all"):
        chosen = [m for m in chosen if m.available_for(network) is None]  # "all": those that can run here
    if target is None:
        target = network.top_k(x, 1)[0][0] if hasattr(network, "top_k") else _top1(network.model, x)
    maps: list[AttributionMap] = []
    total = len(chosen)
    for i, method in enumerate(chosen):
        if progress is not None:
            progress(i, total, method.name)
        try:
            maps.append(method.attribute(network, x, target))
        except Exception as err:  # noqa: BLE001 - reported to the caller, who decides
            if on_error is None:
                raise
            on_error(method.key, err)
    if progress is not None:
        progress(total, total, "done")
    return maps


def compare_target_note(network, x: torch.Tensor, target: int, maps: Iterable[AttributionMap] = ()) -> str:
    """The note `per_sample.target_note` for maps of class `target` on x (1, 3, H, W), or "" when the network
    predicts it well: p(target) and the top-1 of the unmodified network; p(target) with the bottleneck from the
    first Per-Sample map among `maps` (its extra["p_with"]), else p without it (methods without a bottleneck do
    not change what the network sees)."""
    probs = _probabilities(network, x)
    p_without = float(probs[target])
    p_with = next((float(m.extra["p_with"]) for m in maps if "p_with" in m.extra), p_without)
    return target_note(p_without, p_with, int(probs.argmax()) == int(target), head_of(network))


def _probabilities(network, x: torch.Tensor) -> torch.Tensor:
    """The unmodified network's class probabilities for one image under its head, on the CPU."""
    from .model_state import frozen_eval

    model = network.model if hasattr(network, "model") else network
    device = next((p.device for p in model.parameters()), x.device)
    with frozen_eval(model), torch.no_grad():
        return probabilities(model(x.to(device)).float(), head_of(network))[0].cpu()


def _top1(model: torch.nn.Module, x: torch.Tensor) -> int:
    return int(_probabilities(model, x).argmax())
