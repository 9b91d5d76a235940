"""Any torchvision classification network by name: `torchvision:NAME` (e.g. `torchvision:resnet18`).

The builder is `torchvision.models.get_model_builder(NAME)`, its weights the default enum of
`get_model_weights(NAME)`: class names from the enum's `meta["categories"]`, preprocessing (resize,
centre crop, mean, std) from its `transforms()`. The spec is derived (`spec.derive_spec`): layers by
one dry forward pass (CNN feature maps, and transformer tokens on a patch grid: ViT, Swin), the documented
default layer (a transformer's middle block), the last feature map larger than 1×1 for Grad-CAM.

Weights: "pretrained" looks for torchvision's file name (from the enum's url, e.g.
`resnet18-f37072fd.pth`) in IBA_WEIGHTS_DIR, then torch's hub cache, then downloads it; offline
without the file, WeightsUnavailableError says where to put which file. A path loads that state dict
(`.pth`/`.pt` or `.safetensors`, read safely: see `state_files`); "random" gives untrained weights.
"""
from __future__ import annotations

import os
from pathlib import Path

from torch import nn

from .model_size import WeightsCheck, build_seeded
from .spec import CROP, RESIZE, CardArch, NetworkSpec, UnknownModelError, WeightsSource, derive_spec
from .state_files import fit_state_dict, read_weights, weights_hash

PREFIX = "torchvision:"


def is_torchvision_key(key: str) -> bool:
    return isinstance(key, str) and key.startswith(PREFIX)


def classification_models() -> list[str]:
    """torchvision's classification builders (not detection, segmentation, video, optical flow)."""
    import torchvision

    return list(torchvision.models.list_models(module=torchvision.models))


def model_name(key: str) -> str:
    """NAME of `torchvision:NAME`, or a clear error when torchvision has no such classifier."""
    name = key[len(PREFIX):] if is_torchvision_key(key) else key
    known = classification_models()
    if name not in known:
        raise UnknownModelError(
            f"torchvision has no classification network {name!r}; choose one of: {', '.join(known)}.")
    return name


def default_weights(name: str):
    """The default weights enum member of torchvision's `name`, or None when it has none."""
    from torchvision.models import get_model_weights

    try:
        return get_model_weights(name).DEFAULT
    except (ValueError, AttributeError):
        return None


def preprocessing_of(weights) -> dict:
    """resize, crop, mean, std from a weights enum's `transforms()` (ImageNet defaults without one)."""
    if weights is None:
        return {}
    t = weights.transforms()

    def first(value, fallback):
        if value is None:
            return fallback
        return int(value[0]) if isinstance(value, (list, tuple)) else int(value)

    out = {"resize": first(getattr(t, "resize_size", None), RESIZE), "crop": first(getattr(t, "crop_size", None), CROP)}
    if getattr(t, "mean", None) is not None and getattr(t, "std", None) is not None:
        out["mean"], out["std"] = tuple(float(v) for v in t.mean), tuple(float(v) for v in t.std)
    return out


def categories_of(weights) -> list[str]:
    return list(weights.meta.get("categories") or []) if weights is not None else []


def build_model(name: str, weights_check: WeightsCheck | None = None, **kwargs) -> nn.Module:
    """torchvision's `name` with random initialisation, seeded (`model_size.build_seeded`: reproducible, the global RNG
    untouched, no all-zero linear layers; refused above the model-size cap, `weights_check`'s file checked against
    it, before it is built)."""
    from torchvision.models import get_model_builder

    crop = preprocessing_of(default_weights(name)).get("crop", CROP)
    return build_seeded(lambda: get_model_builder(name)(weights=None, **kwargs), title=f"{PREFIX}{name}",
                        input_size=crop, weights_check=weights_check)


def torchvision_spec(key: str, model: nn.Module | None = None) -> NetworkSpec:
    """The derived spec of `torchvision:NAME` (building the model when none is given)."""
    name = model_name(key)
    weights = default_weights(name)
    model = model if model is not None else build_model(name)
    prep = preprocessing_of(weights)
    categories = categories_of(weights)
    source = None
    if weights is not None:
        source = WeightsSource(Path(weights.url).name, weights.url)
    return derive_spec(
        model, PREFIX + name, f"{name} (torchvision{', ' + str(weights).split('.')[-1] if weights else ''})",
        input_size=prep.get("crop", CROP), guess_cam_layer=True, weights=source,
        categories=(lambda: list(categories)) if categories else None,
        note="Any torchvision classifier; layers discovered by a dry forward pass.", **prep,
    )


def load_torchvision_state(spec: NetworkSpec, weights: str | os.PathLike | None, *,
                           trust_pickle: bool = False) -> tuple[dict | nn.Module | None, str]:
    """(state dict or None for random, weights id) for a torchvision spec."""
    from .weights import load_state_dict

    if weights == "random":
        return None, "random"
    if weights in (None, "pretrained"):
        return load_state_dict(spec, None)  # IBA_WEIGHTS_DIR, hub cache, download; else where to put the file
    return read_weights(weights, trust_pickle=trust_pickle), weights_hash(weights)


def card_arch(arch: str, kwargs: dict, classes: list[str] | None, outputs: int | None,
              weights_check: WeightsCheck | None, trust=None) -> CardArch:
    """A model card's `arch = "torchvision:NAME"`: NAME with `num_classes` = the card's outputs (unless its
    [arch_args] say), preprocessing and class names from the default weights."""
    name = model_name(arch)
    weights = default_weights(name)
    if classes is not None:
        kwargs.setdefault("num_classes", outputs)
    return CardArch(build_model(name, weights_check, **kwargs), preprocessing_of(weights), categories_of(weights))


def load_torchvision(key: str, weights: str | os.PathLike | None = "pretrained", *,
                     trust_pickle: bool = False) -> tuple[NetworkSpec, nn.Module, str]:
    """(spec, model with its weights, weights id) of `torchvision:NAME`."""
    name = model_name(key)
    model = build_model(name, WeightsCheck.of(weights, trust_pickle))
    spec = torchvision_spec(key, model)
    state, weights_id = load_torchvision_state(spec, weights, trust_pickle=trust_pickle)
    if isinstance(state, nn.Module):
        state = state.state_dict()
    if state is not None:
        fit_state_dict(model, state, spec.title)
    return spec, model, weights_id
