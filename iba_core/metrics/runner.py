"""The evaluation loop behind `python -m iba_core evaluate`: resume, shard, merge, tabulate.

`run_evaluation(metric, network, items, methods, out, options)` runs one metric over image items for
several attribution methods, appending one JSON line per finished (image, method, setting) to `out`
(flushed at once). Keys already in `out` (or its rank files) are skipped, so an interrupted evaluation
resumes where it stopped. Under torchrun (RANK / WORLD_SIZE set) rank r takes every WORLD_SIZE-th image
and writes `results.rank{r}.jsonl`; `finish` merges the rank files (at a torch.distributed barrier when
there is a rendezvous, else when the last rank is done) and writes the paper-style table.

Every metric is an object of the registry (`registry.get(name)`): its `check` refuses options before any slow
work, its `run` measures one image and writes its records (the paper's metrics and the older yardsticks through
their loops below; a per-map metric such as MoRF AOPC through `run_per_map`), its `format_table` renders the
table. Adding a metric adds nothing here (docs/adding-a-metric.md).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from .. import ranks
from ..heads import head_of, predicted
from . import results as res
from .bbox import LARGEST_BOX_SHARE
from .beta_table import PAPER_BETA_K
from .common import stable_seed
from .degradation import DEGRADATION_TILES
from .road import ROAD_NOISE, ROAD_REMOVED
from .sensitivity_n import SENSITIVITY_TILES
# insertion / deletion and pointing (issue #29)
from .insertion_deletion import RISE, PixelProtocol
from .pointing import POINTING_TOLERANCE


@dataclass
class EvalOptions:
    tiles: Sequence[int] | None = None
    points: int | None = None  # degradation: measurement points per curve (None: every tile)
    precision: str = "auto"  # degradation / sensitivity-n forward passes (iba_core.precision)
    batch_size: int = 64
    sets: int = 100  # sensitivity-n: random tile sets per n
    n_count: int = 16  # sensitivity-n: number of log-spaced n values
    seed: int = 0
    boxes: Path | None = None
    max_box_fraction: float = LARGEST_BOX_SHARE
    layer: str | None = None  # beta-table
    beta_ks: Sequence[float] = PAPER_BETA_K
    steps: int = 10
    stats_images: str | None = None
    stats_n: int | None = None
    sanity_levels: Sequence[str] | None = None
    readouts: Sequence[str] | None = None  # beta-table: readout checkpoints (None: the shipped one)
    progress: bool = True
    # ROAD (Rong et al. 2022): percentages of pixels removed (None: ROAD_REMOVED) and the imputation noise σ
    road_removed: Sequence[float] | None = None
    road_noise: float = ROAD_NOISE
    extra: dict = field(default_factory=dict)
    # insertion / deletion and pointing (issue #29)
    protocol: PixelProtocol = RISE  # insertion / deletion: step, deletion baseline, blur
    tolerance: int = POINTING_TOLERANCE  # pointing game: px around the boxes

    def yardsticks(self):
        """These options as the per-map metrics take them (`yardsticks.YardstickOptions`)."""
        from .yardsticks import YardstickOptions

        return YardstickOptions(protocol=self.protocol, road_removed=tuple(self.road_removed or ROAD_REMOVED),
                                tolerance=self.tolerance, batch_size=self.batch_size, seed=self.seed,
                                road_noise=self.road_noise)


class _Context:
    """Per-run state shared by the metric loops: the model, the writer, the done keys, the counters."""

    def __init__(self, metric: str, network, writer: res.ResultsWriter, done: set, options: EvalOptions):
        self.metric, self.network, self.writer, self.done, self.options = metric, network, writer, done, options
        self.stats = _stats_getter(network, options)
        self.model_id = f"{network.key}/{getattr(network, 'weights_id', '')}"
        self.written = 0
        self._scoring = None
        self.bar = None

    def note(self, text: str) -> None:
        """Show what is being worked on next to the progress bar."""
        if self.bar is not None:
            self.bar.set_postfix_str(text, refresh=True)

    @property
    def scoring(self):
        """The (BatchNorm-folded) network the degradation / sensitivity passes run on."""
        if self._scoring is None:
            from .common import scoring_model

            self._scoring = scoring_model(self.network, self.options.precision)
        return self._scoring

    def key(self, item, method: str, setting: str) -> tuple:
        return (self.metric, item.key, method, setting)

    def is_done(self, item, method: str, setting: str) -> bool:
        return self.key(item, method, setting) in self.done

    def prepare(self, item) -> tuple[torch.Tensor, int]:
        """(preprocessed image on the model's device, target): the label, else the top-1 class."""
        pre = self.network.preprocess
        x = pre(pre.load(item.path)).to(getattr(self.network, "device", "cpu"))
        if item.label is not None:
            return x, int(item.label)
        from ..model_state import frozen_eval

        with frozen_eval(self.network.model), torch.no_grad():
            return x, int(predicted(self.network.model(x), head_of(self.network))[0])

    def write(self, item, method_key: str, method, setting: str, target: int, **data) -> None:
        record = {
            "metric": self.metric,
            "image": item.key,
            "method": method_key,
            "setting": setting,
            "method_name": getattr(method, "name", method_key),
            "model": self.network.key,
            "weights": getattr(self.network, "weights_id", ""),
            "target": int(target),
            "label": item.label,
            **data,
        }
        if self._scoring is not None:  # the precision of the metric's own forward passes
            record["precision"] = getattr(self._scoring, "precision", "fp32")
        self.writer.write(record)
        self.done.add(res.record_key(record))
        self.written += 1


def _timed_map(method, network, x: torch.Tensor, target: int, ctx: "_Context | None" = None) -> tuple[np.ndarray, float]:
    if ctx is not None:
        ctx.note(getattr(method, "name", ""))
    amap = method.attribute(network, x, target)
    return np.asarray(amap.values, dtype=np.float64), amap.seconds


def _pending_maps(ctx: _Context, item, methods: dict, setting: str):
    """(key, method, x, target, map, seconds) for each method without a result for (image, setting); the image is
    prepared once, and only when some method is pending."""
    pending = [k for k in methods if not ctx.is_done(item, k, setting)]
    if not pending:
        return
    x, target = ctx.prepare(item)
    for key in pending:
        values, seconds = _timed_map(methods[key], ctx.network, x, target, ctx)
        yield key, methods[key], x, target, values, seconds


def run_degradation(ctx: _Context, item, methods: dict) -> None:
    from .degradation import degradation_curves

    o = ctx.options
    tiles = list(o.tiles or DEGRADATION_TILES)

    def setting(t: int) -> str:
        return f"{ctx.model_id}|tile={t}" + (f"|points={o.points}" if o.points else "")

    pending = {k: [t for t in tiles if not ctx.is_done(item, k, setting(t))] for k in methods}
    if not any(pending.values()):
        return
    x, target = ctx.prepare(item)
    for key, method in methods.items():
        if not pending[key]:
            continue
        values, seconds = _timed_map(method, ctx.network, x, target, ctx)
        for t in pending[key]:
            curves = degradation_curves(ctx.scoring, x, values, target, t, points=o.points,
                                        batch_size=o.batch_size, head=head_of(ctx.network)).to_record()
            curves.pop("target")
            ctx.write(item, key, method, setting(t), target, points=o.points, attribution_seconds=seconds, **curves)


def _boxed_maps(ctx: _Context, item, methods: dict, setting: str, max_share: float | None = None):
    """(key, method, target, map, seconds, box mask) for each method without a result for (image, setting), when the
    image has boxes on the crop (within `max_share`); else one "*" record says why the image is skipped."""
    if ctx.is_done(item, "*", setting) or all(ctx.is_done(item, k, setting) for k in methods):
        return
    mask, reason = _box_mask(ctx, item, max_share)
    if reason is not None:
        ctx.write(item, "*", None, setting, -1, skipped=reason)
        return
    x, target = ctx.prepare(item)
    for key, method in methods.items():
        if not ctx.is_done(item, key, setting):
            values, seconds = _timed_map(method, ctx.network, x, target, ctx)
            yield key, method, target, values, seconds, mask


def run_bbox(ctx: _Context, item, methods: dict) -> None:
    from .bbox import bbox_ratio

    o = ctx.options
    setting = f"{ctx.model_id}|max_box={o.max_box_fraction:g}"
    for key, method, target, values, seconds, mask in _boxed_maps(ctx, item, methods, setting, o.max_box_fraction):
        ratio = bbox_ratio(values, mask, seed=stable_seed(item.key))
        ctx.write(item, key, method, setting, target, ratio=ratio, box_pixels=int(mask.sum()),
                  attribution_seconds=seconds)


def _box_mask(ctx: _Context, item, max_share: float | None = None) -> tuple[np.ndarray | None, str | None]:
    """(the union of the image's boxes on the crop, None), or (None, why the image is skipped): no annotation,
    no box on the crop, or (with `max_share`) boxes covering more of the crop than that."""
    from .bbox import boxes_on_crop, find_annotation, parse_voc

    from ..errors import UserError

    xml = find_annotation(ctx.options.boxes, item.key)
    if xml is None:
        return None, "no annotation"
    try:
        mask, _ = boxes_on_crop(parse_voc(xml), ctx.network.preprocess)
    except (UserError, OSError, UnicodeDecodeError) as err:  # one bad file skips its image, not the evaluation
        from ..trust import shown

        return None, f"{shown(Path(xml).name, 60)} unreadable: {shown(err, 120)}"
    share = float(mask.mean())
    if mask.sum() == 0:
        return None, "box outside the crop"
    if max_share is not None and share > max_share:
        return None, f"boxes over {max_share:.0%} of the crop"  # the paper's rule, said with its threshold
    return mask, None


def run_sensitivity(ctx: _Context, item, methods: dict) -> None:
    from .sensitivity_n import correlations, logit_drops

    o = ctx.options
    tiles = list(o.tiles or SENSITIVITY_TILES)

    def setting(t: int) -> str:
        return f"{ctx.model_id}|tile={t}|sets={o.sets}|n_count={o.n_count}|seed={o.seed}"

    pending = {k: [t for t in tiles if not ctx.is_done(item, k, setting(t))] for k in methods}
    if not any(pending.values()):
        return
    x, target = ctx.prepare(item)
    drops = {}
    for key, method in methods.items():
        if not pending[key]:
            continue
        if "occluder" in method.settings:
            # Occlude as the metric masks, with zeros (the paper's code did so): at n = 1 the removed
            # attribution then is the logit drop itself.
            method = method.with_settings(occluder="zero")
        values, seconds = _timed_map(method, ctx.network, x, target, ctx)
        for t in pending[key]:
            if t not in drops:  # the random sets and logit drops are shared by all methods
                drops[t] = logit_drops(ctx.scoring, x, target, t, n_count=o.n_count, sets=o.sets,
                                       seed=stable_seed(o.seed, item.key, t), batch_size=o.batch_size,
                                       head=head_of(ctx.network))
            corr = correlations(drops[t], values)
            ctx.write(item, key, method, setting(t), target, tile=t, sets=o.sets, n=drops[t].ns.tolist(),
                      pixels=(drops[t].ns * t * t).tolist(), corr=corr.tolist(), attribution_seconds=seconds)


def run_sanity(ctx: _Context, item, methods: dict) -> None:
    from .sanity import cascading_randomisation, heatmap_ssim, uses_max_over_sign

    o = ctx.options
    setting = f"{ctx.model_id}|seed={o.seed}" + (f"|levels={','.join(o.sanity_levels)}" if o.sanity_levels else "")
    # methods fitted to the weights (readout, patterns) would need refitting at every level: left out
    pending = {k: m for k, m in methods.items() if getattr(m, "sanity_checkable", True) and not ctx.is_done(item, k, setting)}
    if not pending:
        return
    x, target = ctx.prepare(item)
    originals = {k: _timed_map(m, ctx.network, x, target, ctx)[0] for k, m in pending.items()}
    levels: list[str] = []
    scores: dict[str, list[float]] = {k: [] for k in pending}
    wanted = set(o.sanity_levels) if o.sanity_levels else None
    for name, randomised in cascading_randomisation(ctx.network, seed=o.seed):
        if wanted is not None and name not in wanted:
            continue
        levels.append(name)
        ctx.note(f"randomised down to {name}")
        for k, m in pending.items():
            h = np.asarray(m.attribute(randomised, x, target).values, dtype=np.float64)
            scores[k].append(heatmap_ssim(originals[k], h, uses_max_over_sign(m)))
        if wanted is not None and wanted <= set(levels):
            break
    for k, m in pending.items():
        ctx.write(item, k, m, setting, target, levels=levels, ssim=scores[k], max_over_sign=uses_max_over_sign(m))


def run_beta_table(ctx: _Context, item, methods: dict) -> None:
    from .beta_table import INITIAL, ORIG, column_name, per_sample_row, readout_row
    from ..methods import bottleneck_method
    from ..per_sample import BottleneckSettings

    o = ctx.options
    layer = o.layer or ctx.network.spec.default_layer
    if item.label is None:
        return  # counted and reported by the caller
    columns = [ORIG, INITIAL, *(column_name(float(b)) for b in o.beta_ks)]

    def setting(column: str) -> str:
        return f"{ctx.model_id}|{layer}|steps={o.steps}|seed={o.seed}|{column}"

    todo = [c for c in columns if not ctx.is_done(item, "per_sample", setting(c))]
    readouts = [(ckpt, f"{ctx.model_id}|readout={Path(ckpt).name}|seed={o.seed}") for ckpt in _readout_checkpoints(ctx)]
    readout_todo = [(ckpt, s) for ckpt, s in readouts if not ctx.is_done(item, "readout", s)]
    if not todo and not readout_todo:
        return
    x, label = ctx.prepare(item)
    per_sample = type("PerSample", (), {"name": "Per-Sample"})()
    if todo:
        stats = ctx.stats(layer)
        prefix, suffix = ctx.network.fast_split(layer)
        base = BottleneckSettings(steps=o.steps, seed=o.seed)
        # "auto" measured once per network and layer (kept with the network), not once per row
        base = replace(base, precision=bottleneck_method(base, layer=layer, stats=stats).bottleneck(ctx.network)
                       .precision_for(x))
    if ORIG in todo or INITIAL in todo:
        row = per_sample_row(prefix, suffix, stats, x, label, None, base)
        if ORIG in todo:
            ctx.write(item, "per_sample", per_sample, setting(ORIG), label, column=ORIG, layer=layer,
                      top1=row["orig_top1"], top5=row["orig_top5"], info_per_k=None, p_without=row["p_without"])
        if INITIAL in todo:
            ctx.write(item, "per_sample", per_sample, setting(INITIAL), label, column=INITIAL, layer=layer, **row)
    for b in o.beta_ks:
        c = column_name(float(b))
        if c in todo:
            row = per_sample_row(prefix, suffix, stats, x, label, float(b), base)
            ctx.write(item, "per_sample", per_sample, setting(c), label, column=c, layer=layer, beta_k=float(b), **row)
    readout = type("Readout", (), {"name": "Readout"})()
    for ckpt, s in readout_todo:
        row = readout_row(ctx.network, x, label, ckpt, seed=o.seed)
        if row is not None:
            ctx.write(item, "readout", readout, s, label, column=column_name(row["beta_k"]), **row)


def run_road(ctx: _Context, item, methods: dict) -> None:
    """ROAD (Rong et al. 2022): MoRF and LeRF with noisy linear imputation, one record per method."""
    from .road import check_noise, check_removed, road_curves

    o = ctx.options
    removed = check_removed(o.road_removed or ROAD_REMOVED)
    noise = check_noise(o.road_noise)
    setting = f"{ctx.model_id}|removed={','.join(f'{p:g}' for p in removed)}|noise={noise:g}|seed={o.seed}"
    for key, method, x, target, values, seconds in _pending_maps(ctx, item, methods, setting):
        name = getattr(method, "name", key)

        def progress(done: int, total: int, label: str, name: str = name) -> None:
            ctx.note(f"{name}: ROAD {label} ({done}/{total})")

        # one seed per image, so every method's imputations draw the same noise
        curves = road_curves(ctx.scoring, x, values, target, removed, head=head_of(ctx.network), noise=noise,
                             batch_size=o.batch_size, seed=stable_seed(o.seed, item.key),
                             progress=progress).to_record()
        curves.pop("target")
        ctx.write(item, key, method, setting, target, attribution_seconds=seconds, **curves)


def _readout_checkpoints(ctx: _Context) -> list[str]:
    """Readout checkpoints for the β table: --readout, else the shipped one for the network (if any)."""
    if ctx.options.readouts is not None:
        return [str(c) for c in ctx.options.readouts]
    from ..readout import default_checkpoint

    path = default_checkpoint(ctx.network.key)
    return [str(path)] if path is not None else []


# --------------------------------------------------------------------------------------------
# insertion / deletion and pointing (issue #29)


def run_insertion_deletion(ctx: _Context, item, methods: dict) -> None:
    """Insertion or deletion (ctx.metric) of every method's map; the protocol's identity is in the key."""
    from .insertion_deletion import insertion_deletion

    o = ctx.options
    setting = f"{ctx.model_id}|{o.protocol.identity()}|seed={o.seed}"
    for key, method, x, target, values, seconds in _pending_maps(ctx, item, methods, setting):
        name = getattr(method, "name", key)
        curves = insertion_deletion(
            ctx.scoring, x, values, target, o.protocol, head=head_of(ctx.network), which=(ctx.metric,),
            batch_size=o.batch_size, seed=stable_seed(o.seed, item.key),
            progress=lambda done, total, _label: ctx.note(f"{name}: {ctx.metric} {done}/{total}"),
        ).to_record()
        curves.pop("target")
        measured = {k: v for k, v in curves.items() if k in ("fraction", "protocol") or k.startswith(ctx.metric)}
        ctx.write(item, key, method, setting, target, attribution_seconds=seconds, **measured)


def run_pointing(ctx: _Context, item, methods: dict) -> None:
    """The pointing game, energy-based pointing and EHR of every method's map against the image's boxes."""
    from .pointing import pointing_scores

    o = ctx.options
    setting = f"{ctx.model_id}|tolerance={o.tolerance}"
    for key, method, target, values, seconds, mask in _boxed_maps(ctx, item, methods, setting):
        ctx.write(item, key, method, setting, target, tolerance=o.tolerance, box_pixels=int(mask.sum()),
                  box_share=float(mask.mean()),
                  attribution_seconds=seconds, **pointing_scores(values, mask, o.tolerance))


def run_per_map(metric, ctx: _Context, item, methods: dict) -> None:
    """A per-map metric (`registry.Metric.measure`) of every method's map: one record per method with the metric's
    columns and its identity, keyed by that identity (a metric that needs boxes skips an image without one, as
    the pointing game does)."""
    import json

    from .registry import MapBatch

    options = ctx.options.yardsticks()
    identity = metric.identity(options)
    setting = f"{ctx.model_id}|{json.dumps(identity, sort_keys=True)}|seed={options.seed}"
    if metric.needs_boxes:  # the image itself is prepared again below, once, for the metric's passes
        pending = ((k, m, None, t, v, s, mask) for k, m, t, v, s, mask in _boxed_maps(ctx, item, methods, setting))
    else:
        pending = ((k, m, x, t, v, s, None) for k, m, x, t, v, s in _pending_maps(ctx, item, methods, setting))
    image = None
    for key, method, x, target, values, seconds, mask in pending:
        ctx.note(f"{getattr(method, 'name', key)}: {metric.title}")
        if x is None:
            image = ctx.prepare(item)[0] if image is None else image
            x = image
        batch = MapBatch(ctx.scoring, x, [values], target, head_of(ctx.network), mask)
        (measured,) = metric.measure(batch, replace(options, seed=stable_seed(options.seed, item.key)))
        ctx.write(item, key, method, setting, target, identity=identity, attribution_seconds=seconds,
                  **measured.values)


def run_evaluation(
    metric: str,
    network,
    items: Sequence,
    methods: dict[str, object],
    out: str | Path,
    options: EvalOptions | None = None,
    rank: int = 0,
    world: int = 1,
) -> int:
    """Evaluate `items` (this rank's shard is taken here) and append records; returns how many were written.

    network: a Network, or any object with `.model`, `.preprocess`, `.key` (and `.device`).
    Keys already present in `out` or its rank files are skipped.
    """
    from . import registry

    measured = registry.get(metric)  # an unknown name: a UserError naming the choices
    options = options or EvalOptions()
    measured.check(options)
    # its settings against the network's crop (a blur kernel wider than it, …), before any image
    registry.check_on_crop((metric,), options.yardsticks(), registry.crop_of(network))
    out = Path(out)
    done = res.done_keys([out, *res.rank_files(out)])
    path = out if world == 1 else res.rank_path(out, rank)
    mine = ranks.shard(list(items), rank, world)
    from tqdm import tqdm

    with res.ResultsWriter(path) as writer:
        ctx = _Context(metric, network, writer, done, options)
        bar = tqdm(mine, desc=f"{metric}" + (f" rank {rank}/{world}" if world > 1 else ""), unit="img",
                   file=sys.stderr, dynamic_ncols=True, disable=not options.progress)
        ctx.bar = bar if options.progress else None
        for item in bar:
            measured.run(ctx, item, methods)
        bar.close()
        return ctx.written


def _stats_getter(network, options: EvalOptions):
    cache = {}

    def get(layer: str):
        if layer not in cache:
            from ..feature_stats import stats_for_run

            cache[layer] = stats_for_run(network, layer, images=options.stats_images, n=options.stats_n)
        return cache[layer]

    return get


# --------------------------------------------------------------------------------------------
# Ranks, merging, tables.


def finish(out: str | Path, rank: int, world: int, print_table: bool = True) -> str | None:
    """After this rank's shard: merge (if it falls to this rank) and write/print the table."""
    out = Path(out)
    if world > 1:
        res.done_marker(out, rank).touch()
        met = ranks.meet_ranks(world)
        if (met and rank != 0) or (not met and not res.all_ranks_done(out, world)):
            print(f"rank {rank}: shard finished; rank files are merged when all ranks are done", file=sys.stderr)
            return None
        records = res.merge_results(out)
    else:
        records = res.read_records([out, *res.rank_files(out)])
    text, path = res.write_table(records, out)
    if print_table:
        print(text)
        print(f"table saved to {path}", file=sys.stderr)
    return text
