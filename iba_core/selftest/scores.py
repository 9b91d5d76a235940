"""The self-test's measures, a formula each on plain arrays: the model's reaction to the mark (`reaction_of`), each
map's mass inside the mark (`mass_share`), the localisation ratio of the difference maps (`localisation_ratio`),
the AUROC of the mass inside the mark (`mass_auroc`) and the ranking of the methods (`rank_methods`).

Localisation ratio: per image, the difference map D = marked − clean (the same method, target and image); the share
of D's positive mass inside the mark's region (its box: `marks.Placed.scored`), averaged over the images; divided by
the region's share of the crop. 1 is chance: a change spread evenly over the crop; region_share⁻¹ is the most a
method can score (every bit of its change inside the mark). Per image, not pooled: each image counts once whatever
its map's scale.

AUROC: per image and copy, the share of the map's positive mass inside the region (a share, so a map's overall scale
does not decide); how well it tells the marked copies (positives) from the clean ones: 0.5 is chance, 1 every marked
copy above every clean one.

Only the positive part of a map counts: bits are never negative, and a signed map's negative part is evidence
against the class, not where it looks. A map (or a difference map) with no positive mass shows nothing, so nothing
inside the mark: its share is 0.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np

#: The model reacts when the mean probability of one class rises this far, or p(own class) moves this far on average.
REACTS_P = 0.05
#: ...or when at least half of the predictions change, most of them to one class, and that class takes at least this
#: many: a single flip does not count, as a near tie flips at a tiny change (on 8 photos of the offline network a
#: text mark flipped one prediction at p 0.34 → 0.32).
MIN_FLIPS = 2
#: A ratio's denominator is floored here: a probability that underflows to 0 on the clean copies would give ×inf.
RATIO_FLOOR = 0.001


def region_weights(region: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """The region (crop, crop) bool as each map pixel's covered share, for a map of `shape`: itself when the shapes
    agree, else its area average (a map coarser or finer than the crop)."""
    region = np.asarray(region, dtype=np.float32)
    if region.shape == tuple(shape):
        return region
    from PIL import Image

    return np.asarray(Image.fromarray(region, mode="F").resize((shape[1], shape[0]), Image.BOX), dtype=np.float32)


def mass_share(values: np.ndarray, weights: np.ndarray) -> float:
    """The share of a map's positive mass inside the region (`region_weights`); 0 for a map with none (it shows
    nothing, so nothing of the mark)."""
    positive = np.clip(np.nan_to_num(np.asarray(values, dtype=np.float64)), 0, None)
    total = positive.sum()
    return float((positive * weights).sum() / total) if total > 0 else 0.0


def localisation_ratio(clean: Sequence[np.ndarray], marked: Sequence[np.ndarray], region: np.ndarray) -> float:
    """The mean share of the difference maps' (marked − clean) positive mass inside `region`, over the region's share
    of the crop: 1 = chance. NaN without a pair of maps."""
    shares = [mass_share(np.asarray(m, np.float64) - np.asarray(c, np.float64), region_weights(region, np.shape(c)))
              for c, m in zip(clean, marked)]
    if not shares:
        return float("nan")
    return float(np.mean(shares) / np.asarray(region, dtype=np.float64).mean())


def mass_auroc(clean_shares: Sequence[float], marked_shares: Sequence[float]) -> float:
    """AUROC of the share of map mass inside the mark, marked copies positive, clean ones negative; NaN without a
    pair."""
    from sklearn.metrics import roc_auc_score

    clean, marked = list(clean_shares), list(marked_shares)
    if not clean or not marked:
        return float("nan")
    return float(roc_auc_score([0] * len(clean) + [1] * len(marked), [*clean, *marked]))


# --------------------------------------------------------------------------------------------
# The model's reaction.


@dataclass
class Reaction:
    """How the model's outputs move when the mark is planted (means over the images): p(own class) on each copy and
    its change, the share of changed predictions, the class whose probability rises most (`toward`) with its rise and
    its ratio, what the changed predictions became, whether it reacts at all, and the verdict in words."""

    images: int
    p_own_clean: float
    p_own_marked: float
    delta_p_own: float
    changed_share: float
    toward: int
    toward_name: str
    toward_rise: float
    toward_p_clean: float
    toward_p_marked: float
    toward_ratio: float
    changed_to: dict[str, int] = field(default_factory=dict)
    reacts: bool = False
    verdict: str = ""

    def as_dict(self) -> dict:
        return asdict(self)


def _times(after: float, before: float) -> float:
    """after / before, the denominator floored at RATIO_FLOOR (finite: a number in the JSON)."""
    return float(after / max(before, RATIO_FLOOR))


def _ratio(value: float) -> str:
    """×N as read: 3.2, 0.45, 413 (no decimals from 100 on)."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.2g}" if value < 1 else f"{value:.1f}"


def _p(value: float) -> str:
    """A probability as read: two decimals, three below 0.01 (0.002 is not 0.00)."""
    return f"{value:.2f}" if value >= 0.01 or value == 0 else f"{value:.3f}"


def reaction_of(p_clean: np.ndarray, p_marked: np.ndarray, own: Sequence[int], names: Sequence[str]) -> Reaction:
    """The reaction from each image's class probabilities (N, classes) on the clean and the marked copy and its own
    class (N,): `toward` is the class whose mean probability rises most (`names`: the classes' names)."""
    p_clean, p_marked = np.asarray(p_clean, np.float64), np.asarray(p_marked, np.float64)
    own = np.asarray(own, dtype=int)
    rows = np.arange(len(own))
    rise = (p_marked - p_clean).mean(axis=0)
    toward = int(np.argmax(rise))
    before, after = p_clean.argmax(1), p_marked.argmax(1)
    changed = before != after
    counts = np.bincount(after[changed], minlength=p_clean.shape[1])
    reaction = Reaction(
        images=len(own), p_own_clean=float(p_clean[rows, own].mean()), p_own_marked=float(p_marked[rows, own].mean()),
        delta_p_own=float((p_marked[rows, own] - p_clean[rows, own]).mean()), changed_share=float(changed.mean()),
        toward=toward, toward_name=names[toward], toward_rise=float(rise[toward]),
        toward_p_clean=float(p_clean[:, toward].mean()), toward_p_marked=float(p_marked[:, toward].mean()),
        toward_ratio=_times(float(p_marked[:, toward].mean()), float(p_clean[:, toward].mean())),
        changed_to={names[c]: int(counts[c]) for c in np.argsort(-counts, kind="stable") if counts[c]})
    reaction.reacts = (reaction.toward_rise >= REACTS_P or abs(reaction.delta_p_own) >= REACTS_P
                       or predictions_flip(reaction))
    reaction.verdict = verdict(reaction)
    return reaction


def predictions_flip(r: Reaction) -> bool:
    """Whether the predictions flip: at least half of the images change their prediction, most of the changed ones
    to one class, which takes at least MIN_FLIPS of them (a near tie's single flip does not count)."""
    changed = round(r.changed_share * r.images)
    most = next(iter(r.changed_to.values()), 0)
    return r.changed_share >= 0.5 and most >= MIN_FLIPS and 2 * most > changed


def _moved(name: str, before: float, after: float) -> str:
    """"p(name) ×N (before → after)"; "×N or more (from below 0.001 to after)" where `before` is under the floor."""
    if before < RATIO_FLOOR:
        return f"p({name}) ×{_ratio(_times(after, before))} or more (from below {RATIO_FLOOR:g} to {_p(after)})"
    return f"p({name}) ×{_ratio(_times(after, before))} ({_p(before)} → {_p(after)})"


def verdict(r: Reaction) -> str:
    """The reaction in one plain sentence: "your model reacts to this mark: p(…) ×N …" (or "most predictions change
    to X" where only the predictions flip), or the caution that a model that hardly reacts leaves nothing for a map
    to show."""
    changed = f"{r.changed_share:.0%} of predictions change"
    if r.changed_to:
        changed += ", most to " + next(iter(r.changed_to))
    if not r.reacts:
        return (f"your model hardly reacts to this mark (mean Δp(own class) {r.delta_p_own:+.3f}, {changed}, no class "
                f"gains {REACTS_P:g} on average): a map has nothing to show, so this test cannot rank the methods")
    if r.toward_rise >= REACTS_P:
        moved = _moved(r.toward_name, r.toward_p_clean, r.toward_p_marked)
        return f"your model reacts to this mark: {moved}; {changed}"
    if abs(r.delta_p_own) >= REACTS_P:
        return f"your model reacts to this mark: {_moved('own class', r.p_own_clean, r.p_own_marked)}; {changed}"
    name, count = next(iter(r.changed_to.items()))
    return (f"your model reacts to this mark: most predictions change to {name} ({count / r.images:.0%} of the "
            f"images; {r.changed_share:.0%} change in all), though no class gains {REACTS_P:g} on average (mean "
            f"Δp(own class) {r.delta_p_own:+.3f})")


# --------------------------------------------------------------------------------------------
# Per method.


@dataclass
class MethodScore:
    """Does a method's map show the mark: for one method and one target (`target`: "own", each image's own class, or
    "toward", the class the mark pushes toward), over `images` pairs of maps: the localisation ratio (1 = chance, at
    most `best_ratio`), the AUROC, the mean share of map mass inside the mark on each copy, and its place in the
    ranking (1 = best; None when the test cannot rank)."""

    method: str
    name: str
    target: str
    images: int
    localisation_ratio: float
    auroc: float
    share_clean: float
    share_marked: float
    best_ratio: float
    rank: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def rank_methods(scores: list[MethodScore], reacts: bool) -> list[str]:
    """Rank the methods of the ranked target (the "toward" class where the test ran it, else "own") by the
    localisation ratio, then the AUROC, best first; sets each one's `rank`. Nothing is ranked when the model does
    not react (the caution says why) or a score is missing."""
    target = "toward" if any(s.target == "toward" for s in scores) else "own"
    ranked = [s for s in scores if s.target == target and not np.isnan(s.localisation_ratio)]
    if not reacts:
        return []
    ranked.sort(key=lambda s: (-s.localisation_ratio, -np.nan_to_num(s.auroc, nan=0.0), s.method))
    for place, score in enumerate(ranked, 1):
        score.rank = place
    return [s.method for s in ranked]


__all__ = ["MIN_FLIPS", "MethodScore", "RATIO_FLOOR", "REACTS_P", "Reaction", "localisation_ratio", "mass_auroc",
           "mass_share", "predictions_flip", "rank_methods", "reaction_of", "region_weights", "verdict"]
