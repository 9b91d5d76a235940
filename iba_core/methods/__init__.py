"""Attribution methods behind one interface: the paper's baselines (§4.1, Table 2) and the two bottlenecks.

    >>> from iba_core.methods import get_method
    >>> amap = get_method("integrated_gradients", steps=8).attribute(network, x, target)
    >>> amap.values, amap.seconds, amap.signed, amap.unit
    >>> maps = get_method("grad_cam").attribute_batch(network, x_batch, [ClassTarget(281), ClassTarget(3)])

Every method returns a finite float32 (H, W) map for one preprocessed image, explains the target
class's logit (the bottlenecks: its cross-entropy), leaves no hooks, gradients or flag changes on the
user's network (also after an error) and says, via `available_for(network)`, when it cannot run.

Adding a method: one module in this folder with a `base.Method` subclass, and one `register` line
below (or `register_method` from any module, e.g. a plug-in or a test).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterable, Sequence

from ..bottleneck import BottleneckSettings
from ..errors import UserError
from .base import AttributionMap, Method, key_number
from .bottlenecks import M2IB, BottleneckMethod, CoIBAMethod, PerSampleIBA, ReadoutMethod
from .cam import GradCam, GuidedGradCam
from .cam_variants import EigenCam, GradCamPlusPlus, LayerCam, ScoreCam
from .gradients import GuidedBackprop, Gradient, IntegratedGradients, Saliency, SmoothGrad
from .lrp import LRP
from .occlusion import Occlusion
from .pattern import PatternAttribution
from .random_map import RandomMap
from .targets import ClassTarget, LabelSetTarget, Target, as_target

MethodFactory = Callable[..., Method]

#: key → factory(**settings) returning a method. Order is the display order of comparison grids. A key is a named
#: preset (a method class and settings, e.g. `occlusion_8` = Occlusion with size=8); settings given to
#: `get_method` override the preset's, and the method's own `key` then names them (`occlusion_14`, `iba_3`,
#: `lrp_alpha0beta1eps1`), so results keyed by it never claim settings they were not made with.
METHODS: dict[str, MethodFactory] = {}


class UnknownMethodError(UserError):
    """A method key the registry does not know."""


def register_method(key: str, factory: MethodFactory) -> None:
    """Add a method to the registry (after the built-ins); it then appears in the CLI and on the pages."""
    if key in METHODS:
        raise ValueError(f"A method {key!r} is registered already.")
    METHODS[key] = factory


def unregister_method(key: str) -> None:
    METHODS.pop(key, None)


for _key, _factory in (
    ("random", RandomMap),
    ("occlusion_8", partial(Occlusion, size=8)),
    ("occlusion_14", partial(Occlusion, size=14)),
    ("gradient", Gradient),
    ("saliency", Saliency),
    ("integrated_gradients", IntegratedGradients),
    ("smoothgrad", SmoothGrad),
    ("guided_backprop", GuidedBackprop),
    ("grad_cam", GradCam),
    ("guided_grad_cam", GuidedGradCam),
    ("grad_cam_pp", GradCamPlusPlus),
    ("score_cam", ScoreCam),
    ("layer_cam", LayerCam),
    ("eigen_cam", EigenCam),
    ("lrp_alpha1beta0", partial(LRP, rule="alpha1beta0")),
    ("lrp_epsilon", partial(LRP, rule="epsilon")),
    ("lrp_alpha0beta1eps5", partial(LRP, rule="alpha0beta1")),
    ("pattern_attribution", PatternAttribution),
    ("iba_1", partial(PerSampleIBA, beta_k=1.0)),
    ("iba_10", partial(PerSampleIBA, beta_k=10.0)),
    ("iba_100", partial(PerSampleIBA, beta_k=100.0)),
    ("coiba", CoIBAMethod),
    ("readout", ReadoutMethod),
):
    register_method(_key, _factory)


def method_keys() -> list[str]:
    """All registered method keys, in display order."""
    return list(METHODS)


#: A Per-Sample key at a β·k no preset has, as `base.key_number` writes it ("iba_0_1": β·k 0.1): a run.json's
#: method, or a CLIP model's default (M2IB's β·k 0.1, `heads.default_beta_k`).
PER_SAMPLE_KEY = re.compile(r"^iba_(\d+(?:_\d+)?(?:e[-+]?\d+)?)$")


def per_sample_key(beta_k: float) -> str:
    """The Per-Sample method's key at β·k (`get_method` takes it): "iba_10", "iba_0_1"."""
    return f"iba_{key_number(beta_k)}"


#: Names of presets that are another key's: `iba` is the paper's Per-Sample Bottleneck (§4.1: β = 10/k).
ALIASES = {"iba": "iba_10"}
#: Presets `get_method` and `resolve_methods` take that are not (yet) in the registry's display lists (the pages'
#: method menus, "all"): M2IB as its authors run it (`bottlenecks.M2IB`).
PRESETS: dict[str, MethodFactory] = {"m2ib": M2IB}


def get_method(key: str, **settings) -> Method:
    """A fresh method instance; `settings` override its defaults (e.g. steps=8). Besides the registered keys, an
    alias (`ALIASES`: "iba") and a Per-Sample key at any β·k ("iba_0_1", `PER_SAMPLE_KEY`)."""
    key = ALIASES.get(key, key)
    try:
        factory = METHODS[key] if key in METHODS else PRESETS[key]
    except KeyError:
        match = PER_SAMPLE_KEY.match(key)
        if match is None:
            raise UnknownMethodError(f"Unknown attribution method {key!r}; choose from: {', '.join(METHODS)}.") from None
        factory = partial(PerSampleIBA, beta_k=float(match.group(1).replace("_", ".")))
    try:
        return factory(**settings)
    except TypeError as err:  # e.g. a setting given twice
        raise UserError(f"Invalid settings for {key!r}: {err}") from None


def bottleneck_method(settings, *, layer: str | None = None, layer_range=None, stats=None,
                      stats_images: str | None = None, stats_samples: int | None = None) -> BottleneckMethod:
    """The registry's bottleneck method that runs `settings` (a `per_sample.BottleneckSettings`): CoIBA's preset for
    a `coiba.CoIBASettings` (over `layer_range`: (first, last) or "FIRST:LAST"; None: its default range from
    `layer`), M2IB's for the standard-normal prior, else the Per-Sample Bottleneck at its β·k — every field of
    `settings` given to it, so its key and identity name them. The one door of every front end that holds a
    settings object (the Per-Sample page, the CLI, the β × layer grid, the metrics runner): `bottleneck_method(
    settings, layer=…).bottleneck(network).attribute(x, target, callback)`."""
    from dataclasses import asdict

    from ..coiba import CoIBASettings

    values = asdict(settings.validate())
    common = {"stats": stats, "stats_images": stats_images, "stats_samples": stats_samples}
    if isinstance(settings, CoIBASettings):
        key, extra = "coiba", {"layers": layer_range, "layer": layer}
    else:
        key = "m2ib" if settings.prior == "standard_normal" else per_sample_key(settings.beta_k)
        extra = {"layer": layer}
    accepted = get_method(key).default_settings()
    dropped = {k: v for k, v in values.items() if k not in accepted and v != getattr(type(settings)(), k)}
    if dropped:  # a setting the method cannot carry would be lost silently: a bug of the caller
        raise ValueError(f"{key} takes no setting {', '.join(dropped)}.")
    return get_method(key, **{k: v for k, v in values.items() if k in accepted}, **extra, **common)


@dataclass(frozen=True)
class BottleneckRequest:
    """One bottleneck as a user asks for it, the same object from the CLI's options (`cli.attribute.request_of`) and
    from the Per-Sample page's widgets: the preset's settings (a `BottleneckSettings`, CoIBA's `CoIBASettings`, M2IB's
    standard-normal prior), where it sits (`layer`, or CoIBA's `layer_range`: None for the preset's default) and where
    its statistics come from (`stats_images`, `stats_samples`: None for the network's own)."""

    settings: BottleneckSettings
    layer: str | None = None
    layer_range: tuple[str, str] | None = None
    stats_images: str | None = None
    stats_samples: int | None = None

    def method(self) -> BottleneckMethod:
        """The registry's method for it (`bottleneck_method`, the one door)."""
        return bottleneck_method(self.settings, layer=self.layer, layer_range=self.layer_range,
                                 stats_images=self.stats_images, stats_samples=self.stats_samples)


def display_names() -> dict[str, str]:
    """key → display name with default settings, e.g. {"occlusion_8": "Occlusion-8×8", …}."""
    return {key: get_method(key).name for key in METHODS}


def resolve_methods(methods: str | Sequence[str] | None, settings: dict[str, dict] | None = None,
                    default: Iterable[str] | None = None) -> list[Method]:
    """Method instances from 'all', 'a,b,…' or a list of keys (None: `default`, else all).

    Unknown keys fail here, before any slow work; `settings` maps a key to its settings.
    """
    settings = settings or {}
    if methods is None:
        keys = list(default) if default is not None else method_keys()
    elif isinstance(methods, str):
        keys = method_keys() if methods.strip() == "all" else [m.strip() for m in methods.split(",") if m.strip()]
    else:
        keys = list(methods)  # keys and/or Method instances
    if not keys:
        raise UserError("Choose at least one method.")
    keys = [ALIASES.get(k, k) if isinstance(k, str) else k for k in keys]
    unknown = [k for k in keys if isinstance(k, str) and k not in METHODS and k not in PRESETS]
    if unknown:
        raise UnknownMethodError(
            f"Unknown attribution method {', '.join(map(repr, unknown))}; choose from: {', '.join(METHODS)}."
        )
    return [get_method(k, **settings.get(k, {})) if isinstance(k, str) else k for k in dict.fromkeys(keys)]


__all__ = [
    "ALIASES", "M2IB", "PRESETS", "BottleneckMethod", "BottleneckRequest", "bottleneck_method",
    "AttributionMap", "ClassTarget", "LabelSetTarget", "METHODS", "Method", "MethodFactory", "Target",
    "PER_SAMPLE_KEY", "UnknownMethodError", "as_target", "display_names", "per_sample_key",
    "get_method", "method_keys", "register_method", "resolve_methods", "unregister_method",
]
