"""The Evaluate page's checks of the maps for one image: the paper's (§4) degradation curves, sanity check
(cascading randomisation) and bounding-box ratio, and the field's yardsticks (issue #29: insertion and deletion,
ROAD, the pointing game and energy pointing), as the `iba_core.metrics` functions compute them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch
from PIL import Image

from ..errors import UserError
from ..heads import head_of
from ..metrics.bbox import LARGEST_BOX_SHARE
from ..metrics.degradation import DegradationCurves
from ..metrics import registry
from ..progress import ProgressFn
from ..methods import AttributionMap, get_method, method_keys
from ..networks import Network
from .state import Subject

if TYPE_CHECKING:  # type hints only: the yardsticks' modules load when the section runs
    from ..budget import Cost
    from ..metrics.insertion_deletion import InsertionDeletionCurves, PixelProtocol
    from ..metrics.road import RoadCurves

#: What each table column means (the tables' tooltips).
COLUMN_HELP = {
    "Method": "The attribution method whose map is checked.",
    "Area (LeRF − MoRF)": "Area between the scaled LeRF and MoRF curves; higher is better, ≈ 0 for a random map.",
    "p(target) original": "p(target) of the intact image.",
    "p(target) all removed": "p(target) with every tile removed (the curves' floor b).",
    "points": "Measurements per curve.",
    "bbox ratio": "Share of the map's n highest pixels inside the box (n = the box's size); higher is better.",
    "random ≈": "What a random map scores: the box's share of the crop.",
}
#: The paper's table headers → the registered metric whose direction each shows (the yardsticks' headers are their
#: columns' own: `registry.columns()`).
PAPER_HEADERS = {"Area (LeRF − MoRF)": "degradation", "bbox ratio": "bbox"}
COLUMN_HELP.update({c.header: c.help for c in registry.columns()})


def column_label(header: str) -> str:
    """A table header as shown, with its metric's direction from the registry ("insertion AUC ↑", "deletion AUC
    ↓"); a header of no metric (Method, points, …) as it is."""
    for c in registry.columns():
        if c.header == header:
            return c.titled
    if header in PAPER_HEADERS:
        better = registry.get(PAPER_HEADERS[header]).higher_is_better
        return f"{header} {registry.UP if better else registry.DOWN}"
    return header


#: Pixels per character of the table font (Source Sans at 14 px: at most ~6.4 in Chromium), and per column the
#: room for padding and the sort arrow; generous, so that no header or value is cut off.
TABLE_CHAR_PX, TABLE_PAD_PX = 7.0, 32


def table_columns(rows: list[dict]) -> dict[str, dict]:
    """{column: {"label": header shown, "width": pixels, "help": text, "decimals": bool}} for a table of `rows`:
    the label with its metric's direction (`column_label`), each column wide enough for its label and every value,
    so nothing is clipped (st.dataframe's column_config takes these); "decimals": a column of floats, shown with 4
    decimals (1.0 as 1.0000, not 1, like its neighbours)."""
    out: dict[str, dict] = {}
    for name in (rows[0] if rows else {}):
        label = column_label(name)
        chars = max([len(label)] + [len(_cell_text(r.get(name))) for r in rows])
        floats = all(isinstance(r.get(name), float) for r in rows)
        out[name] = {"label": label, "width": int(round(chars * TABLE_CHAR_PX + TABLE_PAD_PX)),
                     "help": COLUMN_HELP.get(name), "decimals": floats}
    return out


def _cell_text(value) -> str:
    """A value as the table shows it (floats with up to 4 decimals)."""
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def chart_colours(keys: Sequence[str]) -> dict[str, str]:
    """{method key: colour} for the Evaluate page's charts and pictures: each method's colour fixed by its place in
    the method registry, so it is the same whichever methods are chosen with it and in whichever order."""
    from ..render.colours import method_colours

    return method_colours(keys, method_keys())


# ---- degradation -------------------------------------------------------------------------------


def degradation_for(network, x: torch.Tensor, maps: dict[str, AttributionMap], target: int, tile: int,
                    points: int | None, progress: ProgressFn | None = None) -> dict:
    """{method key: DegradationCurves} for maps already computed."""
    from ..metrics.degradation import degradation_curves

    out = {}
    for i, (key, amap) in enumerate(maps.items()):
        if progress is not None:
            progress(i, len(maps), amap.name)
        out[key] = degradation_curves(network.model, x, amap.values, target, tile=tile, points=points,
                                      head=head_of(network))
    if progress is not None:
        progress(len(maps), len(maps), "done")
    return out


def degradation_passes(height: int, width: int, tile: int, points: int | None) -> int:
    """Forward passes of one method's degradation curves: MoRF and LeRF, one pass per point of each."""
    from ..metrics.degradation import removal_steps

    return 2 * len(removal_steps(-(-height // tile) * -(-width // tile), points))


@dataclass
class DegradationRun:
    """The Evaluate page's last degradation curves: per method key, for `tile` × `tile` tiles."""

    subject: Subject
    curves: dict[str, DegradationCurves]
    tile: int


def degradation_rows(curves: dict, names: dict[str, str]) -> list[dict]:
    """One table row per method: area between LeRF and MoRF, and the raw end points."""
    return [
        {"Method": names.get(k, k), "Area (LeRF − MoRF)": round(c.area(), 4),
         "p(target) original": round(float(c.morf[0]), 4), "p(target) all removed": round(c.p_full, 4),
         "points": len(c.removed)}
        for k, c in curves.items()
    ]


# ---- sanity check ------------------------------------------------------------------------------


@dataclass
class SanityStrip:
    """A method's map before and after each cascade step, and each one's SSIM to the original."""

    method: str
    original: np.ndarray
    levels: list[str]
    heatmaps: list[np.ndarray]
    ssim: list[float]


@dataclass
class SanityRun:
    """The Evaluate page's last sanity check."""

    subject: Subject
    strip: SanityStrip


def sanity_levels(network) -> list[str]:
    """Cascade level names (logits first) without copying the network: its stages for a registered network,
    else its modules that hold parameters (e.g. a model card's network: fc, layer4.1.bn2, …)."""
    from ..metrics.sanity import randomisation_groups

    plain = isinstance(network, Network) and not network.can_split
    return [name for name, _ in randomisation_groups(network.model if plain else network)]


def sanity_strip(network, x: torch.Tensor, target: int, method_key: str, max_levels: int,
                 progress: ProgressFn | None = None, seed: int = 0) -> SanityStrip:
    """Heatmap after each of the first `max_levels` cascade steps and its SSIM to the original map."""
    from ..metrics.sanity import cascading_randomisation, heatmap_ssim, uses_max_over_sign

    method = get_method(method_key)
    sign = uses_max_over_sign(method)
    if progress is not None:
        progress(0, max_levels + 1, "original")
    original = np.asarray(method.attribute(network, x, target).values, dtype=np.float64)
    levels, maps, scores = [], [], []
    for name, randomised in cascading_randomisation(network, seed):
        if len(levels) >= max_levels:
            break
        if progress is not None:
            progress(len(levels) + 1, max_levels + 1, f"randomised down to {name}")
        h = np.asarray(method.attribute(randomised, x, target).values, dtype=np.float64)
        levels.append(name)
        maps.append(h)
        scores.append(heatmap_ssim(original, h, sign))
    if progress is not None:
        progress(max_levels + 1, max_levels + 1, "done")
    return SanityStrip(method.name, original, levels, maps, scores)


# ---- bounding box ------------------------------------------------------------------------------


def bbox_rows(maps: dict[str, AttributionMap], mask: np.ndarray) -> list[dict]:
    """Ratio of the top-n pixels inside the box, per method (n = the box's pixel count)."""
    from ..metrics.bbox import bbox_ratio

    share = float(np.asarray(mask, bool).mean())
    return [{"Method": m.name, "bbox ratio": round(bbox_ratio(m.values, mask), 4),
             "random ≈": round(share, 4)} for m in maps.values()]


@dataclass
class BoxRun:
    """The Evaluate page's last bounding-box scores: one table row per method, the box's share of the crop,
    whether it is larger than the paper allows, and the crop with the box drawn on it."""

    subject: Subject
    rows: list[dict]
    share: float
    large: bool
    picture: Image.Image


def box_run(subject: Subject, maps: dict[str, AttributionMap], mask: np.ndarray,
            boxes: list[tuple[float, float, float, float]], cropped: Image.Image) -> BoxRun:
    """Score the maps against the box mask and draw the boxes (crop coordinates) on the crop."""
    from ..render.overlays import draw_boxes

    return BoxRun(subject, bbox_rows(maps, mask), float(np.asarray(mask, bool).mean()), large_box(mask),
                  draw_boxes(cropped, boxes))


def large_box(mask: np.ndarray) -> bool:
    """Whether the box covers more of the crop than the paper allows (`LARGEST_BOX_SHARE`)."""
    return float(np.asarray(mask, bool).mean()) > LARGEST_BOX_SHARE


def large_box_warning(share: float, consequence: str) -> str | None:
    """The warning beside scores against a box larger than `LARGEST_BOX_SHARE` of the crop (None for a smaller
    one): one sentence for the bounding-box ratio and the pointing game, ending in what it means for the score."""
    if share <= LARGEST_BOX_SHARE:
        return None
    return f"The box covers {share:.0%} of the crop (more than {LARGEST_BOX_SHARE:.0%}): {consequence}"


def box_text(boxes: Sequence[tuple[float, float, float, float]]) -> str:
    """The boxes a score was measured against, in pixels of the crop ("x0, y0, x1, y1"; several joined by ";")."""
    return "; ".join(", ".join(f"{round(v, 1):g}" for v in box) for box in boxes)


# ---- the field's yardsticks (issue #29) --------------------------------------------------------

#: Progress units per measurement (insertion and deletion; ROAD) of one method: the library's own
#: (done, total) is spread over these, so one bar with one time estimate covers every method.
PHASE_UNITS = 100


@dataclass
class MethodYardsticks:
    """One method's yardsticks on the image: every measured column's value (`values`: the registry's per-map
    metrics, the pointing game's only with a box), each metric's curve (`curves`: metric name → what its chart
    draws), and the point the pointing game reads, the map's maximum, (row, column) on the crop."""

    values: dict[str, float]
    curves: dict[str, object]
    peak: tuple[int, int]

    @property
    def pixels(self) -> "InsertionDeletionCurves":
        """The insertion and deletion curves as one (the chart draws both)."""
        from ..metrics.insertion_deletion import InsertionDeletionCurves

        ins, dele = self.curves["insertion"], self.curves["deletion"]
        return InsertionDeletionCurves(fraction=ins.fraction, insertion=ins.insertion, deletion=dele.deletion,
                                       target=ins.target, protocol=ins.protocol)

    @property
    def road(self) -> "RoadCurves":
        return self.curves["road"]

    @property
    def pointing(self) -> dict[str, float] | None:
        """The scores of the metrics that need a box; None when the run had none."""
        boxed = [c.name for m in registry.per_map() if m.needs_boxes for c in m.columns]
        return {c: self.values[c] for c in boxed} if all(c in self.values for c in boxed) else None


def pointing_box(text: str, xml: str | bytes | None, preprocess) -> tuple[np.ndarray, list]:
    """(mask on the crop, boxes) for the pointing game from the page's one box input (`inputs.box_input`),
    refused before any slow work when no box reaches the crop (an annotation's boxes may all lie outside it)."""
    from .inputs import box_input

    mask, boxes = box_input(text, xml, preprocess)
    if not np.asarray(mask, bool).any():
        raise UserError("No box of the annotation lies on the network's crop; the pointing game needs one there.")
    return mask, boxes


#: The metrics the page's charts and caption describe (insertion and deletion: one chart; ROAD: its own); every other
#: per-map metric is said by its columns' help under the table.
PAGE_CHARTED = ("insertion", "deletion", "road")


def page_metrics(boxed: bool) -> tuple["registry.Metric", ...]:
    """The registry's per-map metrics the page measures: those that need a box only when one is given."""
    return tuple(m for m in registry.per_map() if boxed or not m.needs_boxes)


def yardsticks_for(network, x: torch.Tensor, maps: dict[str, AttributionMap], target: int,
                   protocol: "PixelProtocol", *, removed: Sequence[int] | None = None,
                   mask: np.ndarray | None = None, tolerance: int | None = None, batch_size: int = 64,
                   seed: int = 0, progress: ProgressFn | None = None) -> dict[str, MethodYardsticks]:
    """{method key: MethodYardsticks} for maps already computed, each metric of the registry's (`page_metrics`)
    measuring as the library does: insertion and deletion under `protocol`, ROAD at `removed` percent (default: the
    paper's points), MoRF AOPC, …, and, when a box `mask` (the crop's shape) is given, the pointing game within
    `tolerance` px and energy pointing.

    progress gets (done, total, "<method> · <metric>") in `PHASE_UNITS` per metric with forward passes of each
    method.
    """
    from ..metrics.common import scoring_model
    from ..metrics.pointing import POINTING_TOLERANCE, pointing_point
    from ..metrics.registry import MapBatch
    from ..metrics.road import ROAD_REMOVED, check_removed
    from ..metrics.yardsticks import YardstickOptions

    options = YardstickOptions(protocol=protocol, road_removed=tuple(ROAD_REMOVED if removed is None
                                                                     else check_removed(removed)),
                               tolerance=POINTING_TOLERANCE if tolerance is None else tolerance,
                               batch_size=batch_size, seed=seed)
    metrics = page_metrics(mask is not None)
    # the settings against the crop (a step larger than it, …): refused before the metrics' forward passes
    registry.check_on_crop([m.name for m in metrics], options, (int(x.shape[-2]), int(x.shape[-1])))
    model, head = scoring_model(network), head_of(network)
    pixels = int(x.shape[-2]) * int(x.shape[-1])
    timed = [m for m in metrics if m.forward_passes(pixels, options) > 0]  # the rest take no time worth a phase
    total = len(timed) * PHASE_UNITS * len(maps)
    phases = iter(range(len(timed) * len(maps)))

    def phase(label: str) -> ProgressFn | None:
        if progress is None:
            return None
        index = next(phases)
        progress(index * PHASE_UNITS, total, label)

        def report(done: int, of: int, _: str = "") -> None:
            progress(index * PHASE_UNITS + round(PHASE_UNITS * min(done / max(of, 1), 1.0)), total, label)

        return report

    out: dict[str, MethodYardsticks] = {}
    for key, amap in maps.items():
        values: dict[str, float] = {}
        curves: dict[str, object] = {}
        for metric in metrics:
            told = phase(f"{amap.name} · {metric.title}") if metric in timed else None
            (measured,) = metric.measure(MapBatch(model, x, [amap.values], target, head, mask, told), options)
            values.update(measured.values)
            curves[metric.name] = measured.curve
        out[key] = MethodYardsticks(values, curves, pointing_point(amap.values))
    if progress is not None:
        progress(total, total, "done")
    return out


def check_yardstick_settings(network, protocol: "PixelProtocol", removed: Sequence[int] | None = None,
                             boxed: bool = False) -> None:
    """The page's yardstick settings against the network's crop (`registry.check_on_crop`: a blur kernel wider than
    the crop, a ROAD percentage that removes no pixel), refused before any map is made."""
    from ..metrics.road import ROAD_REMOVED
    from ..metrics.yardsticks import YardstickOptions

    options = YardstickOptions(protocol=protocol, road_removed=tuple(ROAD_REMOVED if removed is None else removed))
    registry.check_on_crop([m.name for m in page_metrics(boxed)], options, registry.crop_of(network))


def yardsticks_cost(methods: int, pixels: int, protocol: "PixelProtocol", removed: Sequence[int] | None = None,
                    boxed: bool = False) -> "Cost":
    """The network passes `yardsticks_for` costs for `methods` maps of `pixels` pixels: each metric's
    (`Metric.forward_passes`) per map, by metric."""
    from ..budget import Cost
    from ..metrics.road import ROAD_REMOVED
    from ..metrics.yardsticks import YardstickOptions

    options = YardstickOptions(protocol=protocol, road_removed=tuple(ROAD_REMOVED if removed is None else removed))
    cost = Cost()
    for metric in page_metrics(boxed):
        cost = cost + Cost.part(metric.title, methods * metric.forward_passes(pixels, options))
    return cost


#: Forward passes per method above which the page says how many a step gives, before anything runs (a step of a
#: few pixels on a CPU takes many minutes).
MANY_PASSES = 1000


def forward_passes(crop: int, step: int) -> int:
    """Forward passes of insertion and deletion for one method on a `crop` × `crop` image, `step` pixels a step:
    ⌈crop²/step⌉ + 1 points on each of the two curves."""
    from ..metrics.insertion_deletion import step_counts

    return 2 * len(step_counts(crop * crop, step))


def progress_text(done: int, total: int, label: str, elapsed: float) -> str:
    """A progress bar's line: what is measured, the share done and, once known, the time left at the pace so
    far ("Saliency · ROAD · 40 % · about 12.0 s left")."""
    from ..render.text import format_seconds
    from .stats_source import seconds_left

    text = f"{label} · {done / max(total, 1):.0%}"
    left = seconds_left(done, total, elapsed)
    if left is not None and done < total:
        text += f" · about {format_seconds(left)} left"
    return text


@dataclass
class YardstickRun:
    """The Evaluate page's last yardsticks: per method key, under `protocol`; with a box, the pointing game's
    `tolerance`, the boxes' share of the crop, the picture of the boxes and each map's maximum, and the boxes
    (x0, y0, x1, y1 on the crop) the pointing game was scored against."""

    subject: Subject
    protocol: "PixelProtocol"
    methods: dict[str, MethodYardsticks]
    tolerance: int
    box_share: float | None = None
    picture: Image.Image | None = None
    boxes: list[tuple[float, float, float, float]] | None = None

    @property
    def removed(self) -> list[float]:
        """The percents of pixels ROAD removed (the same for every method)."""
        first = next(iter(self.methods.values()), None)
        return [] if first is None else [float(v) for v in first.road.removed]


def yardstick_run(subject: Subject, results: dict[str, MethodYardsticks], protocol: "PixelProtocol",
                  tolerance: int, mask: np.ndarray | None = None,
                  boxes: list[tuple[float, float, float, float]] | None = None,
                  cropped: Image.Image | None = None) -> YardstickRun:
    """The run to keep; with a box, the crop with the boxes and each method's maximum drawn (chart colours)."""
    if mask is None or boxes is None or cropped is None:
        return YardstickRun(subject, protocol, results, tolerance)
    from ..render.overlays import pointing_picture

    picture = pointing_picture(cropped, boxes, [r.peak for r in results.values()], tolerance,
                               list(chart_colours(list(results)).values()))
    return YardstickRun(subject, protocol, results, tolerance, float(np.asarray(mask, bool).mean()), picture,
                        [tuple(map(float, b)) for b in boxes])


def yardstick_rows(run: YardstickRun, names: dict[str, str]) -> list[dict]:
    """One table row per method: the columns of every measured metric that needs no box (insertion and deletion
    areas, ROAD's scores, MoRF AOPC, …: the registry's order), 4 decimals."""
    columns = [c for m in page_metrics(False) for c in m.columns]
    return [{"Method": names.get(key, key),
             **{c.header: c.shown(r.values[c.name]) for c in columns if c.name in r.values}}
            for key, r in run.methods.items()]


def pointing_rows(run: YardstickRun, names: dict[str, str]) -> list[dict]:
    """One table row per method with the scores of the metrics that need a box (the pointing game: hit or miss,
    energy pointing, EHR; 4 decimals); none when the run had no box. A table of its own, beside the picture of the
    box and the maxima (one table of every column is wider than the page)."""
    columns = [c for m in registry.per_map() if m.needs_boxes for c in m.columns]
    return [{"Method": names.get(key, key), **{c.header: c.shown(r.values[c.name]) for c in columns}}
            for key, r in run.methods.items() if r.pointing is not None]


def yardstick_csv(run: YardstickRun, names: dict[str, str]) -> bytes:
    """The per-method numbers as CSV (full precision, the pointing hit as 1/0), each row saying what it measured:
    image, network, class, protocol, ROAD's points, the pointing tolerance."""
    import pandas as pd

    from .dataset import table_csv

    records = []
    for key, r in run.methods.items():
        record = {"image": run.subject.image, "network": run.subject.model, "target": run.subject.target,
                  "class": run.subject.class_name, "method": key, "method_name": names.get(key, key),
                  **r.values,  # every measured column (the pointing game's only with a box)
                  "protocol": run.protocol.name, "protocol_settings": run.protocol.identity(),
                  "road_removed": " ".join(f"{v:g}" for v in run.removed)}
        if r.pointing is not None:
            record["pointing_tolerance"] = run.tolerance
        records.append(record)
    return table_csv(pd.DataFrame(records))
