"""The choices and defaults the pages offer: β·k, thresholds, sample photo, and which methods, per network."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from ..errors import UserError
from ..methods import Method, get_method, method_keys
from ..bottleneck import DEFAULT_BETA_K  # noqa: F401  (the pages read the default here, with the choices)
from .maps import MapRequest

if TYPE_CHECKING:
    from .checkpoints import ReadoutCheckpoint

#: β·k on a log scale, 1-2-5 steps from 0.01 to 1000 (paper default 10).
BETA_K_CHOICES: tuple[float, ...] = tuple(
    round(m * 10.0**e, 6) for e in range(-2, 3) for m in (1, 2, 5)
) + (1000.0,)

#: Thresholds for the "not needed" view, in bits per pixel.
THRESHOLD_CHOICES: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
DEFAULT_THRESHOLD = 0.05

#: The sample photo shown first.
DEFAULT_SAMPLE = "chelsea"

#: Quick first look on a CPU: a few network passes each, plus one Per-Sample Bottleneck.
DEFAULT_COMPARE_METHODS = ("saliency", "grad_cam", "occlusion_14", "iba_10")
#: The registered method the Compare page offers through its own checkpoint choice, not in its method list.
READOUT_METHOD = "readout"
#: Evaluation runs every metric per method: two cheap baselines and the paper's Per-Sample Bottleneck
#: (β = 10/k, the method the checks are about; seconds on a CPU).
DEFAULT_EVALUATE_METHODS = ("saliency", "grad_cam", "iba_10")
#: Sanity check default method: one backward pass per cascade level.
DEFAULT_SANITY_METHOD = "saliency"
#: Degradation: the default number of points per curve (the tile sizes: metrics.degradation.DEGRADATION_TILES).
DEFAULT_POINTS = 17
#: Default object box as shares of the crop's side (x0, y0, x1, y1): ~31 % of the crop, under
#: metrics.bbox.LARGEST_BOX_SHARE (50, 40, 170, 170 on a 224 crop).
DEFAULT_BOX_SHARES = (50 / 224, 40 / 224, 170 / 224, 170 / 224)


def default_box(crop: int) -> tuple[int, int, int, int]:
    """The default object box in pixels of a `crop` × `crop` input (the same share of it for every crop)."""
    x0, y0, x1, y1 = (round(share * crop) for share in DEFAULT_BOX_SHARES)
    return x0, y0, x1, y1


@dataclass
class MethodChoices:
    """Methods a page offers for a network: those that can run on it, in display order, and the others with
    the reason they cannot."""

    keys: list[str] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)  # key → reason

    def defaults(self, wanted: Iterable[str]) -> list[str]:
        """The keys of `wanted` that are offered, in the order given (a previous selection, or a page default)."""
        return [k for k in wanted if k in self.keys]


def method_choices(network, *, exclude: Iterable[str] = (),
                   keep: Callable[[Method], bool] | None = None, first: Sequence[str] = ()) -> MethodChoices:
    """Registered methods (minus `exclude`, and those `keep` rejects) split by `available_for(network)`; `first`:
    keys `get_method` takes beyond the registry, offered before them (`head_default_keys`)."""
    skip = set(exclude)
    out = MethodChoices()
    for key in (*first, *method_keys()):
        if key in skip:
            continue
        method = get_method(key)
        if keep is not None and not keep(method):
            continue
        reason = method.available_for(network)
        if reason:
            out.unavailable[key] = app_reason(key, network, reason)
        else:
            out.keys.append(key)
    return out


def head_default_keys(network) -> tuple[str, ...]:
    """The Per-Sample method at the network's head's default β·k where no preset has it (a CLIP model: M2IB's
    β·k 0.1, `heads.default_beta_k`), offered first; () for a classifier (its default, 10, is `iba_10`)."""
    from ..heads import default_beta_k
    from ..methods import METHODS, per_sample_key

    key = per_sample_key(default_beta_k(network))
    return () if key in METHODS else (key,)


def folder_run_choices(network) -> tuple[MethodChoices, dict[str, str], list[str]]:
    """(choices, display names, defaults) of a folder run's methods on `network`: the registered methods, and for
    a head whose default β·k no preset has (a CLIP model's 0.1) that Per-Sample method first and chosen."""
    from ..heads import default_beta_k
    from ..methods import display_names, get_method, per_sample_key

    extra = head_default_keys(network)
    names = {**display_names(), **{key: get_method(key).name for key in extra}}
    return method_choices(network, first=extra), names, [per_sample_key(default_beta_k(network))]


def app_reason(key: str, network, reason: str) -> str:
    """Why a method cannot run, in the app's words: the methods' own reasons name no front end; for a missing
    readout checkpoint the app adds where on its pages to find or make one."""
    spec = getattr(network, "spec", None)
    if key == READOUT_METHOD and spec is not None:
        return (f"no Readout Bottleneck checkpoint for {spec.title} yet; the Compare page's “Readout Bottleneck "
                "checkpoints” says where the app looks for one")
    return reason


def compare_choices(network) -> MethodChoices:
    """The Compare page's method list: every method but the Readout (chosen by its checkpoint there)."""
    return method_choices(network, exclude=[READOUT_METHOD])


def sanity_choices(network) -> MethodChoices:
    """Methods for the sanity check, which recomputes the map after each randomisation step: fast ones only."""
    return method_choices(network, keep=lambda m: m.cost == "fast" and m.sanity_checkable)


def default_sanity_method(choices: MethodChoices) -> int:
    """Index of the preselected sanity-check method among `choices.keys`."""
    return choices.keys.index(DEFAULT_SANITY_METHOD) if DEFAULT_SANITY_METHOD in choices.keys else 0


def unavailable_text(choices: MethodChoices, names: dict[str, str]) -> str:
    """'Not available for this network: A (reason); B (reason).' or '' when every method is."""
    if not choices.unavailable:
        return ""
    by_reason: dict[str, list[str]] = {}  # methods refused for one reason share it: said once (e.g. the LRP rules)
    for key, reason in choices.unavailable.items():
        by_reason.setdefault(reason.rstrip("."), []).append(names.get(key, key))
    parts = [f"{', '.join(methods)} ({reason})" for reason, methods in by_reason.items()]
    return "Not available for this network: " + "; ".join(parts) + "."



def compare_request(methods: Iterable[str], names: dict[str, str],
                    readout: "ReadoutCheckpoint | None") -> MapRequest:
    """The Compare page's maps: the chosen methods, then the Readout from the chosen checkpoint (named by it)."""
    request = MapRequest(list(methods), {}, dict(names))
    if readout is not None:
        request.keys.append(READOUT_METHOD)
        request.settings[READOUT_METHOD] = readout.method_settings()
        request.names[READOUT_METHOD] = readout.label
    if not request.keys:
        raise UserError("Choose at least one method.")
    return request
