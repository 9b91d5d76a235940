"""Concept discovery for a folder run (`find_concepts`): per class and for the whole run, the layer's concepts
(`factorise`), each image's concept maps, the bits that fall on each concept (`measures`) and the class probability
when a concept is removed or kept alone (`layer_pass`), written into the run folder as a concept set (`store`).

Two passes per group over its images, in batches (never all activations in memory): the fit pass samples at most
`FIT_ROWS` location vectors (an even share per image, seeded) and factorises them with NMF — or, for groups of more
than `STREAM_IMAGES` images, streams them through MiniBatchNMF — and the measure pass finds every image's
coefficients with the concepts fixed, its maps and numbers, and runs the removal checks (2K + 2 rows of the
network's rest per image). Resumable by group: a finished group is skipped, a damaged one redone. Under torchrun,
rank 0 fits, every rank measures its share of the images, and rank 0 writes the group's table.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from ..errors import UserError
from . import factorise, measures, store
from .layer_pass import LayerPass

#: The most location vectors a group's fit samples (≈ 256 MB at 1,280 channels).
FIT_ROWS = 50_000
#: Groups of more images than this are fitted by MiniBatchNMF, streamed …
STREAM_IMAGES = 10_000
#: … reading at least this many locations of each image (their rows pass once; they are never held together).
STREAM_ROWS = 16
#: The activation transform, recorded in the set's identity.
TRANSFORM = "positive part"

Progress = Callable[[int, int, str], None]


@dataclass
class ConceptSettings:
    """What a concept set is made with (all but the classes, the whole-run group and the batching are its identity)."""

    k: int | None = None  # concepts per group; None: the reconstruction error's elbow over 2 … k_max
    layer: str | None = None  # None: the run's bottleneck layer
    method: str | None = None  # the run's bits method whose maps give the bits share (None: its first)
    classes: tuple[int, ...] | None = None  # None: every class of the run
    whole_run: bool = True  # a group of all the run's images too
    seed: int = 0
    batch_images: int = 8
    k_max: int = factorise.K_MAX
    fit_rows: int = FIT_ROWS


@dataclass
class ConceptsSummary:
    """What one call of `find_concepts` did."""

    set_dir: Path
    done: list[str] = field(default_factory=list)  # groups finished by this call
    skipped: list[str] = field(default_factory=list)  # groups finished before
    images: int = 0  # the images read
    unreadable: list[str] = field(default_factory=list)  # "image: why"
    damaged: list[str] = field(default_factory=list)  # units moved aside and redone
    failed: dict[str, str] = field(default_factory=dict)  # group → why it is left out (its images cannot be read)
    seconds: float = 0.0


@dataclass
class Item:
    """An image of a group: its key, class, and its row in the run's table (for the bits map)."""

    key: str
    target: int
    row: object  # the run's row (a Series) of the bits method, or of the first method without one


@dataclass
class Plan:
    layer: str
    method: str | None  # the bits method, None when the run has none
    identity: dict
    groups: list[tuple[str, int | None, list[Item]]]  # (name, target, images)
    class_names: dict[int, str]


def same_network(network, info: dict) -> bool:
    """Whether `network` is the one a run (its run.json `info`) was made with: its key and its weights."""
    return str(info.get("network")) == str(getattr(network, "key", "")) \
        and str(info.get("weights", "")) == str(getattr(network, "weights_id", ""))


def plan(network, run, settings: ConceptSettings) -> Plan:
    """The layer, the bits method, the identity and the groups of a concept set for `run`; UserError for a run
    this network did not make, a prompt run, or a class or layer it does not have."""
    from ..runs.highlights import BITS_UNIT

    info = run.info
    if (info.get("settings") or {}).get("targets") == "prompts":
        raise UserError("This run explains text prompts; concepts are found per class, so run them on a run that "
                        "explains classes.")
    if not same_network(network, info):
        raise UserError(f"The run was made with the network {info.get('network')} (weights {info.get('weights')}); "
                        f"the network given is {network.key} (weights {network.weights_id}). Concepts need the "
                        "run's own network.")
    layer = network.spec.check_layer(settings.layer or info.get("layer") or network.spec.default_layer)
    units = {k: str(m.get("unit", "")) for k, m in (info.get("methods") or {}).items()}
    bits = [k for k, unit in units.items() if unit == BITS_UNIT]
    method = settings.method or (bits[0] if bits else None)
    if method is not None and method not in units:
        raise UserError(f"The run has no method {method!r}; it has {', '.join(units) or 'none'}.")
    if method is not None and units[method] != BITS_UNIT:
        raise UserError(f"{method} gives no bits; the bits share needs a bottleneck method "
                        f"({', '.join(bits) or 'the run has none'}).")
    table = run.table
    rows = table[table["error"].isna() & (table["method"] == (method or next(iter(units), "")))]
    rows = rows[rows["target"].notna()]
    if not len(rows):
        raise UserError("The run has no results to find concepts in.")
    names = {int(t): str(n) for t, n in zip(rows["target"], rows["class_name"])}
    classes = sorted(names) if settings.classes is None else list(settings.classes)
    missing = [c for c in classes if c not in names]
    if missing:
        raise UserError(f"The run has no images of class {missing[0]} (its classes: "
                        f"{', '.join(f'{c} {names[c]}' for c in sorted(names)[:8])}{' …' if len(names) > 8 else ''}).")
    items = [Item(str(r["image"]), int(r["target"]), r) for _, r in rows.iterrows()]
    groups = [(store.group_name(c), c, [i for i in items if i.target == c]) for c in classes]
    if settings.whole_run:
        groups.append((store.ALL, None, items))
    identity = {"format": store.SET_FORMAT, "layer": layer, "k": settings.k,
                "k_max": None if settings.k else settings.k_max, "method": method,
                "seed": settings.seed, "transform": TRANSFORM, "fit_rows": settings.fit_rows,
                "run": {"network": info.get("network"), "weights": info.get("weights")}}
    return Plan(layer, method, identity, groups, names)


def _load(network, run, items: Sequence[Item], unreadable: list[str]) -> tuple[list[Item], torch.Tensor | None]:
    """The images of `items` preprocessed (those that load) and the items they are; a file that cannot be used is
    noted in `unreadable` and left out."""
    from ..image_folders import ImageItem
    from ..runs.rows import load_image

    kept, xs = [], []
    for item in items:
        loaded = load_image(network, ImageItem(item.key, run.image_path(item.row)), [], None, run.path)
        if loaded.error:
            note = f"{item.key}: {loaded.error}"
            if note not in unreadable:
                unreadable.append(note)
            continue
        kept.append(item)
        xs.append(loaded.x)
    return kept, torch.cat(xs) if xs else None


def _batches(items: Sequence[Item], size: int):
    for start in range(0, len(items), size):
        yield items[start:start + size]


def _sample_rows(positive: torch.Tensor, items: Sequence[Item], per_image: int, seed: int) -> np.ndarray:
    """Up to `per_image` location vectors of each image (seeded by the image's key: the same on every rerun)."""
    import zlib

    out = []
    for i, item in enumerate(items):
        rows = positive[i].flatten(1).T.cpu().numpy()  # (h·w, C)
        if per_image < len(rows):
            rng = np.random.default_rng([seed, zlib.crc32(item.key.encode())])
            rows = rows[np.sort(rng.choice(len(rows), per_image, replace=False))]
        out.append(rows)
    return np.concatenate(out) if out else np.zeros((0, 0), dtype=np.float32)


def fit_group(lp: LayerPass, run, items: Sequence[Item], settings: ConceptSettings, unreadable: list[str],
              tick: Callable[[int, str], None]) -> tuple[np.ndarray, dict]:
    """A group's concepts W and what chose them (k, curve, error, solver, negative share, rows fitted)."""
    cells = None
    per_image = 1
    rows, negative, total, missed = [], 0.0, 0.0, 0
    streamed = len(items) > STREAM_IMAGES

    def sampled(batch: Sequence[Item]) -> np.ndarray:
        nonlocal cells, per_image, negative, total, missed
        kept, x = _load(lp.network, run, batch, unreadable)
        missed += len(batch) - len(kept)
        tick(len(batch), "fit")
        if x is None:
            return np.zeros((0, 0), dtype=np.float32)
        grid = lp.read(x).grid
        negative += float(grid.clamp(max=0).abs().sum())
        total += float(grid.abs().sum())
        if cells is None:
            cells = grid.shape[2] * grid.shape[3]
            share = math.ceil(settings.fit_rows / len(items))
            per_image = max(1, min(cells, max(share, STREAM_ROWS) if streamed else share))
        return _sample_rows(grid.clamp(min=0), kept, per_image, settings.seed)

    if not streamed:
        rows = [r for b in _batches(items, settings.batch_images) if len(r := sampled(b))]
        if not rows:
            raise UserError("None of the group's images could be read.")
        data = np.concatenate(rows)
        k, curve = (settings.k, []) if settings.k else factorise.choose_k(data, settings.k_max, settings.seed)
        factors = factorise.fit(data, k, settings.seed)
    else:  # the elbow on the first batches' rows; then those and every later batch once through MiniBatchNMF
        first = settings.batch_images * 8
        rows = [r for b in _batches(items[:first], settings.batch_images) if len(r := sampled(b))]
        k, curve = (settings.k, []) if settings.k else factorise.choose_k(np.concatenate(rows), settings.k_max,
                                                                          settings.seed)

        def every() -> Iterator[np.ndarray]:
            yield from rows
            for batch in _batches(items[first:], settings.batch_images):
                more = sampled(batch)
                rows.append(more[:0])  # counted below by its length only
                counted.append(len(more))
                yield more

        counted: list[int] = []
        factors = factorise.stream(every(), k, settings.seed)
        rows.append(np.zeros((sum(counted), 0), dtype=np.float32))
    factors.curve = curve
    info = {"k": factors.k, "curve": factors.curve, "error": factors.error, "solver": factors.solver,
            "negative_share": negative / total if total > 0 else 0.0, "rows": int(sum(len(r) for r in rows)),
            "unread": missed}
    return factors.components, info


def _variants(positive: torch.Tensor, negative: torch.Tensor, u: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """(2K + 1, C, h, w): the layer's grid with each concept's part removed (first K), kept alone (next K), and with
    no positive activation at all (the last: the baseline "nothing kept"). A concept's part of the positive
    activations is min(U_k W_k, P): never more than is there; the negative part is kept in every variant."""
    c, h, wd = positive.shape
    mass = u.T[:, None, :] * w[:, :, None]  # (K, C, h·w): U_k(loc) · W_k
    part = torch.minimum(mass.reshape(len(w), c, h, wd), positive[None])
    return torch.cat([positive[None] - part + negative[None], part + negative[None], negative[None]])


def measure_batch(lp: LayerPass, factors: factorise.Factors, items: Sequence[Item], x: torch.Tensor, run,
                  method: str | None) -> tuple[list[dict], list[np.ndarray]]:
    """The image × concept rows and the concept maps ((K, h, w) each) of a batch of loaded images."""
    from ..runs.store import encode_map

    read = lp.read(x)
    positive, negative = read.grid.clamp(min=0), read.grid.clamp(max=0)
    n, c, h, wd = positive.shape
    w = torch.from_numpy(factors.components).to(positive.device)
    coefficients = factors.coefficients(positive.flatten(2).transpose(1, 2).reshape(-1, c).cpu().numpy())
    grids, targets, rows, maps = [], [], [], []
    for i, item in enumerate(items):
        u = coefficients[i * h * wd:(i + 1) * h * wd]
        grids += [read.grid[i:i + 1], _variants(positive[i], negative[i], torch.from_numpy(u).to(w.device), w)]
        targets.append(torch.full((2 * factors.k + 2,), item.target, dtype=torch.long))
    rep = torch.tensor([2 * factors.k + 2] * n)
    extra = None if read.extra is None else read.extra.repeat_interleave(rep.to(read.extra.device), 0)
    images = x.repeat_interleave(rep, 0) if lp.suffix is None else None  # only the hook path runs the images
    p = lp.probabilities_with(images, torch.cat(grids), extra, torch.cat(targets)).reshape(n, -1).cpu().numpy()
    for i, item in enumerate(items):
        u = coefficients[i * h * wd:(i + 1) * h * wd]
        shares = measures.location_shares(u, factors.components)
        bits = measures.bits_per_cell(run.heatmap(item.row), (h, wd)) if method else np.full(h * wd, np.nan)
        in_concept = measures.image_bits(bits, shares)
        total = float(bits.sum())
        mass = measures.concept_mass(u, factors.components)
        stored, scale = encode_map(mass.T.reshape(-1, h, wd))
        xs, ys = measures.peaks(u, (h, wd))
        present, areas = measures.presence(u, factors.components), measures.area(mass)
        for k in range(factors.k):
            share = in_concept[k] / total if total > 0 else float("nan")
            rows.append({"image": item.key, "target": item.target, "fit_index": k, "presence": present[k],
                         "bits": in_concept[k], "total_bits": total, "bits_share": share,
                         # an image uses a concept that holds enough of its bits (of its activation, without bits)
                         "uses": bool((share if method else present[k]) >= measures.USE_SHARE), "area": areas[k],
                         "p_full": p[i, 0], "p_without": p[i, 1 + k], "p_only": p[i, 1 + factors.k + k],
                         "p_none": p[i, -1], "peak_x": xs[k],
                         "peak_y": ys[k], "map_index": len(maps), "map_scale": scale, "grid_h": h, "grid_w": wd})
        maps.append(stored)
    return rows, maps


def _rank_place() -> tuple[int, int]:
    """(rank, world); UserError when several ranks cannot meet (they share the fits through the folder)."""
    from ..ranks import rank_and_world

    return rank_and_world()


def _meet(world: int) -> None:
    from ..ranks import meet_ranks

    if world > 1 and not meet_ranks(world):
        raise UserError("Concepts under several ranks need torchrun's rendezvous (MASTER_ADDR): the ranks share "
                        "each group's fit through the run folder and must wait for each other.")


def images_digest(items: Sequence[Item]) -> str:
    """A group's images as a short hash (their keys, sorted): a group made from other images is made again."""
    import hashlib

    return hashlib.sha256("\n".join(sorted(i.key for i in items)).encode()).hexdigest()[:12]


def _current(fitted: tuple[np.ndarray, dict] | None, digest: str) -> bool:
    """Whether a committed fit stands: made from the group's images as they are now, every one of them read (a
    group that missed images, or all of them, is tried again: the files may be back)."""
    return fitted is not None and fitted[1].get("images") == digest and not fitted[1].get("unread") \
        and not fitted[1].get("failed")


def unreadable_group(name: str, run, unreadable: list[str]) -> str:
    """The sentence for a group none of whose images could be read now (no server path: a visitor may read it)."""
    first = next((u for u in unreadable), "").rstrip(".")
    return (f"None of the images of {name} could be read from the run's image folder"
            + (f" (the first: {first})" if first else "") + "; its concepts are left out.")


def _fit(lp: LayerPass, run, folder: Path, name: str, items: list[Item], settings: ConceptSettings,
         summary: ConceptsSummary, tick: Callable[[int, str], None]) -> tuple[np.ndarray, dict]:
    """The group's fit: the committed one when it was made from the same images, else made now by rank 0 (a group
    whose images cannot be read gets a fit that says so, so every rank leaves it)."""
    rank, world = _rank_place()
    digest = images_digest(items)
    fitted = store.read_fit(folder, name)
    if rank == 0 and not _current(fitted, digest):
        store.drop_group(folder, name)  # its table described the old fit: never shown beside the new one
        try:
            components, info = fit_group(lp, run, items, settings, summary.unreadable,
                                         lambda n, phase: tick(n, f"{phase} {name}"))
        except UserError:
            components, info = np.zeros((0, 0), np.float32), {"failed": unreadable_group(name, run,
                                                                                           summary.unreadable)}
        store.write_fit(folder, name, components, {**info, "images": digest})
    else:
        tick(len(items), f"fit {name}")
    _meet(world)
    fitted = store.read_fit(folder, name)
    if fitted is None:
        raise UserError(f"The fit of {name} is missing from {folder}; run the concepts again.")
    return fitted


def do_group(lp: LayerPass, run, folder: Path, group: tuple[str, int | None, list[Item]], the_plan: Plan,
             settings: ConceptSettings, summary: ConceptsSummary, tick: Callable[[int, str], None]) -> str | None:
    """One group, start to end: its fit (rank 0, or the one committed before from the same images), this rank's
    measure pass, and (rank 0, after every rank) its table. Returns why the group is left out, or None."""
    from ..ranks import shard
    from .group_table import group_table

    name, target, items = group
    rank, world = _rank_place()
    components, info = _fit(lp, run, folder, name, items, settings, summary, tick)
    if info.get("failed"):
        return str(info["failed"])
    factors = factorise.Factors(components, float(info["error"]), info["curve"], info["solver"])
    fit_id = store.fit_id(components)
    rows, maps = [], []
    for batch in _batches(shard(items, rank, world), settings.batch_images):
        kept, x = _load(lp.network, run, batch, summary.unreadable)
        if x is not None:
            more, more_maps = measure_batch(lp, factors, kept, x, run, the_plan.method)
            rows += [dict(r, map_index=r["map_index"] + len(maps), fit=fit_id) for r in more]
            maps += more_maps
        tick(len(batch), f"measure {name}")
    store.write_part(folder, name, rank, rows, maps)
    _meet(world)
    images = store.read_group_images(folder, name, fit_id)
    if not len(images):  # every rank read the same parts: all leave the group alike
        return unreadable_group(name, run, summary.unreadable)
    if rank == 0:
        class_name = "all images" if target is None else the_plan.class_names.get(target, f"class {target}")
        store.write_group(folder, name, group_table(images, name, target, class_name, info))
    return None


def _check_layer(lp: LayerPass, network, settings: ConceptSettings) -> None:
    """A layer concepts can be found at: a grid of at least 2 × 2 cells (on one cell every concept sits "at one
    position" and the bits have no place), and at least K channels."""
    import torch

    size = network.spec.crop
    grid = lp.read(torch.zeros(1, network.spec.channels, size, size)).grid
    c, h, w = grid.shape[1:]
    if h * w < 4:
        raise UserError(f"The layer {lp.layer} has a {h} × {w} grid; concepts need places on the image (a grid of at "
                        "least 2 × 2): choose an earlier layer.")
    if settings.k is not None and settings.k > c:
        raise UserError(f"The layer {lp.layer} has {c} channels, so it holds at most {c} concepts, not {settings.k}.")


def find_concepts(network, run_dir, settings: ConceptSettings | None = None,
                  progress: Progress | None = None) -> ConceptsSummary:
    """Find the concepts of a folder run (made with `network`) per class and for the whole run, into a concept set
    in the run folder (`store`); resumable: finished groups are skipped (made again when their images changed or
    some could not be read), damaged ones redone, a group none of whose images can be read left out
    (`summary.failed`). `progress(done, total,
    label)` after every batch (images read, both passes counted; the label names the pass and the group: "fit
    class-3", "measure all")."""
    from ..ranks import joined
    from ..runs.tables import open_run

    started = time.monotonic()
    settings = settings or ConceptSettings()
    if settings.k is not None and not 1 <= settings.k <= 64:
        raise UserError(f"The number of concepts must be 1 to 64, not {settings.k}.")
    run = open_run(run_dir)
    the_plan = plan(network, run, settings)
    lp = LayerPass(network, the_plan.layer)
    _check_layer(lp, network, settings)
    folder = store.start_set(run.path, the_plan.identity)
    summary = ConceptsSummary(folder)
    rank, world = _rank_place()
    with joined(world):
        if rank == 0:
            summary.damaged = [u for u, _ in store.heal(folder)]
        _meet(world)  # no rank reads the set while rank 0 moves damaged files aside
        done = store.done_groups(folder)
        current = {g[0] for g in the_plan.groups
                   if g[0] in done and _current(store.read_fit(folder, g[0]), images_digest(g[2]))}
        todo = [g for g in the_plan.groups if g[0] not in current]
        summary.skipped = [g[0] for g in the_plan.groups if g[0] in current]
        total, count = 2 * sum(len(g[2]) for g in todo), [0]

        def tick(n: int, label: str) -> None:
            count[0] += n
            if progress is not None:
                progress(count[0], total, label)

        for group in todo:
            failed = do_group(lp, run, folder, group, the_plan, settings, summary, tick)
            if failed:
                summary.failed[group[0]] = failed
            else:
                summary.done.append(group[0])
        if rank == 0:  # always: a table cut short or deleted since is written again
            store.write_tables(folder)
    summary.images = len({i.key for g in the_plan.groups for i in g[2]} - {u.split(": ", 1)[0]
                                                                         for u in summary.unreadable})
    summary.seconds = time.monotonic() - started
    return summary


def estimate_seconds(network, run_dir, settings: ConceptSettings | None = None, sample: int = 2) -> float:
    """About how long `find_concepts` will take, measured on `sample` of the run's images on this machine: each
    image's two passes (read; coefficients, maps and the 2K + 2 removal checks) scaled to the groups' images, plus
    each group's fits (one NMF fit of the sample's rows timed, scaled by rows where a group has more: a fit's
    time is mostly its fixed cost on small groups, proportional to its rows on large ones)."""
    from ..runs.tables import open_run

    settings = settings or ConceptSettings()
    run = open_run(run_dir)
    the_plan = plan(network, run, settings)
    lp = LayerPass(network, the_plan.layer)
    items = the_plan.groups[0][2][:sample]
    kept, x = _load(network, run, items, [])
    if x is None:
        raise UserError("None of the run's first images can be read now.")
    lp.read(x[:1])  # the first pass builds and caches what later passes reuse: not timed
    started = time.perf_counter()
    kept, x = _load(network, run, items, [])
    grid = lp.read(x).grid
    read = (time.perf_counter() - started) / len(kept)
    rows = grid.clamp(min=0).flatten(2).transpose(1, 2).reshape(-1, grid.shape[1]).cpu().numpy()
    k = settings.k or settings.k_max
    factorise.fit(rows[:64], 2, settings.seed)  # scikit-learn's first call imports and compiles: not timed
    started = time.perf_counter()
    factors = factorise.fit(rows, k, settings.seed)
    one_fit = time.perf_counter() - started
    started = time.perf_counter()
    measure_batch(lp, factors, kept, x, run, the_plan.method)
    measure = (time.perf_counter() - started) / len(kept)
    cells = grid.shape[2] * grid.shape[3]
    seconds = 0.0
    for _, _, group in the_plan.groups:
        fit_rows = min(settings.fit_rows, len(group) * cells)
        fits = one_fit * max(1.0, fit_rows / len(rows))
        elbow = 0.0 if settings.k else (k - factorise.K_MIN + 1) * one_fit * max(1.0, min(factorise.ELBOW_ROWS,
                                                                                           fit_rows) / len(rows))
        seconds += len(group) * (2 * read + measure) + fits + elbow
    return seconds
