"""Sanity check: cascading weight randomisation (Adebayo et al. 2018; paper §4.3 and appendix).

Starting at the logits, the network's parameterised modules are re-initialised group by group down to
the first layer, cumulatively, on a deep copy (the caller's model is never touched). After each group
the attribution is recomputed and compared with the original heatmap by SSIM (scikit-image,
win_size=5, data_range=1) after normalising both maps: clamp to their 1st/99th percentiles and
rescale to [0, 1]. Methods whose maps flip sign under randomisation (LRP, per the paper) are scored
with max(SSIM(h_o, h_r), SSIM(h_o, −h_r)).

Groups: for a registered network (anything with `.stages()`, e.g. a Network), one group per
stage, in reverse — "logits" (the classifier head) first, then e.g. conv5_3, conv5_2, … for ResNet-50.
For a plain nn.Module, one group per module that owns parameters, in reverse registration order.
Re-initialisation uses each module's own `reset_parameters` (BatchNorm: weight 1, bias 0, running
statistics reset) with a seed fixed per group, so a randomised network is reproducible; its
`weights_id` names the cascade level so cached feature statistics never mix with the original's.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from .common import group_records, method_label, stable_seed

METRIC = "sanity"
SSIM_WINDOW = 5

#: attribute(model_like, x, target) → (H, W) map; model_like is a Network copy or an nn.Module copy.
ModelAttributionFn = Callable[[object, torch.Tensor, int], np.ndarray]


def normalise_heatmap(h: np.ndarray) -> np.ndarray:
    """Clamp to the 1st/99th percentiles and rescale to [0, 1]; a flat map becomes all zeros."""
    h = np.nan_to_num(np.asarray(h, dtype=np.float64))
    lo, hi = np.percentile(h, [1, 99])
    if hi - lo <= 1e-12 * max(1.0, abs(hi), abs(lo)):
        return np.zeros_like(h)
    return (np.clip(h, lo, hi) - lo) / (hi - lo)


def heatmap_ssim(original: np.ndarray, other: np.ndarray, max_over_sign: bool = False) -> float:
    """SSIM between two normalised heatmaps; with max_over_sign also against −other, keeping the max."""
    from skimage.metrics import structural_similarity

    a = normalise_heatmap(original)

    def score(b: np.ndarray) -> float:
        return float(structural_similarity(a, normalise_heatmap(b), win_size=SSIM_WINDOW, data_range=1.0))

    s = score(other)
    if max_over_sign:
        s = max(s, score(-np.asarray(other, dtype=np.float64)))
    return s


def uses_max_over_sign(method) -> bool:
    """Whether a method is scored with max over ±h: its `sanity_max_over_sign` flag if it has one,
    else True for LRP variants (the paper's rule)."""
    flag = getattr(method, "sanity_max_over_sign", None)
    if flag is not None:
        return bool(flag)
    return "lrp" in str(getattr(method, "key", "")).lower()


# --------------------------------------------------------------------------------------------
# Randomisation.


def randomisation_groups(model_like) -> list[tuple[str, list[nn.Module]]]:
    """[(name, modules)] in cascade order: the classifier head first, the first layer last."""
    # a stage list only where the network has one (`can_split`): card networks have `.stages()` that raise
    if getattr(model_like, "can_split", hasattr(model_like, "stages")):
        groups = []
        for name, module in reversed(model_like.stages()):
            if any(True for _ in module.parameters()):
                groups.append((name or "logits", [module]))
        return groups
    if not isinstance(model_like, nn.Module):
        raise TypeError(f"Cannot randomise a {type(model_like).__name__}.")
    owners = [(n or "model", m) for n, m in model_like.named_modules() if any(True for _ in m.parameters(recurse=False))]
    return [(name, [m]) for name, m in reversed(owners)]


def reinitialise(modules: Sequence[nn.Module], seed: int) -> None:
    """Re-initialise every parameter below `modules` (their default init), reproducibly for `seed`."""
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for root in modules:
            for m in root.modules():
                own = list(m.parameters(recurse=False))
                if hasattr(m, "reset_parameters") and (own or hasattr(m, "running_mean")):
                    m.reset_parameters()
                elif own:
                    for p in own:
                        if p.dim() > 1:
                            nn.init.kaiming_uniform_(p, a=5**0.5)
                        else:
                            nn.init.zeros_(p)


def cascading_randomisation(model_like, seed: int = 0) -> Iterator[tuple[str, object]]:
    """Yield (group name, randomised copy) for each cascade level, each more random than the last.

    model_like: a Network (anything with `.model`, optionally `.stages()`) or a plain nn.Module. The copy
    is made once and randomised cumulatively; each yielded object is only valid until the next one.
    """
    is_wrapper = isinstance(getattr(model_like, "model", None), nn.Module) and not isinstance(model_like, nn.Module)
    if is_wrapper:
        work = copy.deepcopy(model_like.model)
        base = _with_model(model_like, work, getattr(model_like, "weights_id", "weights"))
        groups = randomisation_groups(base if getattr(base, "can_split", hasattr(base, "stages")) else work)
    else:
        work = copy.deepcopy(model_like)
        groups = randomisation_groups(work)
    for name, modules in groups:
        reinitialise(modules, stable_seed(seed, name))
        if is_wrapper:
            weights_id = f"{getattr(model_like, 'weights_id', 'weights')}+cascade-{seed}-{name}"
            yield name, _with_model(model_like, work, weights_id)
        else:
            yield name, work


def _with_model(network, model: nn.Module, weights_id: str):
    """A Network sharing everything with `network` but the network (and its caches)."""
    if dataclasses.is_dataclass(network):
        changes = {"model": model}
        names = {f.name for f in dataclasses.fields(network)}
        if "weights_id" in names:
            changes["weights_id"] = weights_id
        if "memo" in names:
            changes["memo"] = type(network.memo)()  # an empty cache of its kind
        return dataclasses.replace(network, **changes)
    clone = copy.copy(network)
    clone.model = model
    if hasattr(clone, "weights_id"):
        clone.weights_id = weights_id
    if hasattr(clone, "memo"):
        clone.memo = type(clone.memo)()
    return clone


def sanity_check(
    model_like,
    x: torch.Tensor,
    target: int,
    attribute: ModelAttributionFn,
    *,
    max_over_sign: bool = False,
    original: np.ndarray | None = None,
    levels: Sequence[str] | None = None,
    seed: int = 0,
) -> list[tuple[str, float]]:
    """[(cascade level, SSIM to the original heatmap)] for one image and one method.

    attribute(model_like, x, target) computes a heatmap with the given (possibly randomised) network.
    levels: stop after the last of these group names (default: randomise down to the first layer).
    """
    if original is None:
        original = np.asarray(attribute(model_like, x, target), dtype=np.float64)
    out = []
    wanted = set(levels) if levels is not None else None
    for name, randomised in cascading_randomisation(model_like, seed):
        if wanted is None or name in wanted:
            h = np.asarray(attribute(randomised, x, target), dtype=np.float64)
            out.append((name, heatmap_ssim(original, h, max_over_sign)))
            if wanted is not None and wanted <= {n for n, _ in out}:
                break
    return out


# --------------------------------------------------------------------------------------------
# Records → table.


def format_table(records: Sequence[dict]) -> str:
    from .results import markdown_table

    records = [r for r in records if r.get("metric", METRIC) == METRIC]
    parts = ["### Sanity check: mean SSIM to the original heatmap, randomised from the logits down to …"]
    for (setting,), rs in group_records(records, "setting").items():
        levels = list(dict.fromkeys(level for r in rs for level in r["levels"]))
        rows = []
        for (method,), ms in group_records(rs, "method").items():
            row = [method_label(records, method)]
            for level in levels:
                vals = [s for r in ms for lv, s in zip(r["levels"], r["ssim"]) if lv == level and s is not None]
                row.append(float(np.mean(vals)) if vals else None)
            row.append(len(ms))
            rows.append(row)
        parts.append(f"{rs[0].get('model', '')} (lower after randomisation is better)")
        parts.append(markdown_table(["Method", *levels, "images"], rows, digits=2))
    return "\n\n".join(parts) + "\n"
