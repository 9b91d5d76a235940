"""The folder run: every image of a folder (or of a list of images) × the chosen methods, batched, resumable,
sharded across torchrun ranks.

    root, items = list_images("val/", labels=None, class_index=network.class_index)
    run_folder(network, items, [get_method("iba_10")], "runs/val", FolderSettings(), root=root)
    finish_run("runs/val")                       # writes the table, with distance_to_class_mean
    open_run("runs/val").table

Per chunk of `batch_images` images: each image is loaded and preprocessed (a file that cannot be read, or does
not suit the network, becomes an error row for each method), the network runs once on the chunk (the top-1 class,
its probability, p(target)), then each method makes its maps through the one interface,
`method.attribute_batch` (the bottlenecks, Readout, gradient, CAM and LRP methods batch for real; the others run
image by image); `method.prepare` runs first, so missing statistics or checkpoints stop the run before any image.
A method that fails on a batch is tried image by image, so one bad image costs one error row. A row a bug failed
(anything but a `UserError`) says "a bug" with a reference, its traceback in RUN_DIR/errors.log (`bug_log`); a row
the user's file or choice failed keeps that sentence. Rows go to the run folder in parts (`store.PartWriter`), also
when the run is interrupted (Ctrl-C); a rerun skips every (image, method) that has a row (error rows too, unless
`FolderSettings.retry_errors`), after moving damaged parts aside so their rows are done again (`checks.heal`). Each
image is claimed before its work (`claims.py`): two runs into one folder share its images, each computed once.

The field's metrics (`FolderSettings.metrics`: the metric registry's per-map ones, insertion, deletion, ROAD,
pointing, MoRF AOPC, …; none by default, as each costs forward passes) are measured for every map as the run
stores it, with the scoring network built once per run (`metrics.yardsticks`), into the row's metric columns.
They and their protocol are part of the run's identity: a rerun that leaves one out or measures one another way
is refused; a rerun that adds one measures it for the rows already there too (their stored maps, their images
loaded again), so every row ends with the same columns.

The target: `FolderSettings.target` when given, else the image's label, else the network's top-1 class. With text
prompts (`FolderSettings.prompts`, a CLIP network): one row per image × method × prompt, the prompt in the row's
`prompt` column and its index in the run's prompts (run.json's `prompts`, which a later run may add to) as the
row's target; p_target is the cosine similarity of the image with the prompt, and the row's "predicted" the run's
prompt most similar to the image.
Under torchrun (RANK / WORLD_SIZE) rank r takes every WORLD_SIZE-th image (`metrics.results.shard`) and writes
its own parts; `finish_run` meets the ranks at a barrier and rank 0 writes the table.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
import torch

from ..errors import UserError
from ..heads import head_of, probabilities
from ..methods import Method
from ..image_folders import ImageItem, list_items
from ..jsonable import jsonable
from ..ranks import meet_ranks, shard
from ..model_state import frozen_eval
from ..progress import ProgressFn
from .measures import THUMBNAIL, map_measures
from .bug_log import row_error
from .claims import Claims
from .checks import heal
from .store import (PART_ROWS, PART_SECONDS, PartWriter, decode_map, done_pairs, encode_map, part_names, start_run,
                    unmeasured)
from .tables import write_table

if TYPE_CHECKING:
    from ..metrics.yardsticks import YardstickOptions

#: A text file of image paths (one a line, relative to the file) stands for a folder.
LIST_SUFFIX = ".txt"
#: Images per chunk: one network pass and one batched Per-Sample run (N × B noisy copies) per chunk.
BATCH_IMAGES = 8


@dataclass
class FolderSettings:
    """What a folder run does beyond its methods (part of its identity, except the batching and the parts)."""

    target: int | None = None  # explain this class in every image; None: the label, else the top-1 class
    boxes: Path | None = None  # Pascal-VOC XML files named like the images: box_share
    stats_images: str | None = None  # the Per-Sample Bottleneck's statistics images (None: the network's, or photos)
    batch_images: int = BATCH_IMAGES
    retry_errors: bool = False  # try (image, method) pairs with an error row again (e.g. files fixed since)
    part_rows: int = PART_ROWS
    part_seconds: float = PART_SECONDS
    #: the field's yardsticks per map (`metrics.yardsticks.YARDSTICKS`): none by default, as each costs forward
    #: passes (insertion or deletion: one per step of the protocol, ROAD: two per percentage)
    metrics: tuple[str, ...] = ()
    #: how they are measured (`metrics.yardsticks.YardstickOptions`; None: the defaults, the RISE protocol)
    yardsticks: "YardstickOptions | None" = None
    #: text prompts to explain in every image (a CLIP network), each a row per image and method; () explains a class
    prompts: tuple[str, ...] = ()


@dataclass
class RunSummary:
    """What one call of `run_folder` did (on this rank)."""

    images: int = 0  # this rank's images
    skipped: int = 0  # images with nothing left to do
    rows: int = 0  # rows written
    errors: int = 0  # of them with an error
    parts: int = 0
    error_examples: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)  # damaged parts moved aside (RUN_DIR/damaged/): rows redone
    measured: int = 0  # rows made before that were given the metrics this run added


# --------------------------------------------------------------------------------------------
# The images.


def read_image_list(path: str | os.PathLike) -> list[Path]:
    """The images a text file lists: one path a line, relative to the file's folder (or absolute); blank lines and
    lines starting with '#' are skipped, a path listed twice counts once."""
    path = Path(path).expanduser()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"The image list {path} cannot be read ({err}).") from None
    files = [Path(os.path.normpath(path.parent / line.strip())) for line in lines
             if line.strip() and not line.strip().startswith("#")]
    return list(dict.fromkeys(files))


def list_images(source: str | os.PathLike, labels: str | os.PathLike | None = None,
                class_index: Callable[[str], int] | None = None,
                limit: int | None = None, categories: Sequence[str] = ()) -> tuple[Path, list[ImageItem]]:
    """(root, items) of a folder (every image below it, sorted) or of a `.txt` list of images (its folder is the
    root), labelled as `evaluate` labels them (`image_folders.list_items`: a label file, class folders, wnids)."""
    source = Path(source).expanduser()
    if source.is_dir():
        root, files = source, None
    elif source.is_file() and source.suffix.lower() == LIST_SUFFIX:
        root, files = source.parent, read_image_list(source)
    else:
        raise UserError(f"{source} is neither a folder of images nor a {LIST_SUFFIX} list of images.")
    items = list_items(root, labels, class_index, limit, files=files, categories=categories)
    if not items:
        raise UserError(f"No images (jpg, png, …) found {'below' if files is None else 'in the list'} {source}.")
    return root, items


# --------------------------------------------------------------------------------------------
# The run's identity: what a later run must share to add to it.


def method_identity(network, method: Method) -> dict:
    """A method's settings as they decide its maps (`Method.settings_identity`: e.g. the layer resolved, a
    readout checkpoint by its hash)."""
    # "layers": where its maps are made (a report's header names them per method), beside the settings compared
    return {"name": method.name, "unit": method.unit, "settings": method.settings_identity(network),
            "layers": method.layers_read(network)}


def run_identity(network, methods: Sequence[Method], settings: FolderSettings, root: str | os.PathLike) -> dict:
    """run.json's identity of a run: network, weights, layer, run settings, methods; where the images are."""
    # a one-layer bottleneck's layer, or the first of CoIBA's range (its information is counted there), as the
    # bottleneck resolves it (`BottleneckMethod.resolve`: CoIBA's branch inputs are layers of a view of the network)
    layers = [found[0] for found in (m.bottleneck_layers(network) for m in methods) if found]
    return {
        "network": network.key,
        "weights": getattr(network, "weights_id", ""),
        "layer": layers[0] if layers else None,
        **({"prompts": list(settings.prompts)} if settings.prompts else {}),
        "settings": {
            **({"targets": "prompts"} if settings.prompts else {}),  # a prompt run never mixes with a class run
            "target": settings.target,
            "boxes": str(Path(settings.boxes).expanduser().resolve()) if settings.boxes else None,
            "stats_images": str(settings.stats_images) if settings.stats_images else None,
            "thumbnail": THUMBNAIL,
            **({"yardsticks": yardsticks_identity(settings)} if settings.metrics else {}),
        },
        "methods": {m.key: method_identity(network, m) for m in methods},
        "source": str(Path(root).expanduser().resolve()),
        # how the maps lie on the images (the Dataset page draws each map over the crop the network saw)
        "preprocess": {"resize": getattr(network.preprocess, "resize", None),
                       "crop": getattr(network.preprocess, "crop_size", None)},
    }


def yardsticks_identity(settings: FolderSettings) -> dict:
    """run.json's record of the run's metrics and how they are measured (`metrics.yardsticks.yardstick_identity`):
    part of the run's identity, so rows measured two ways never share a table."""
    from ..metrics.yardsticks import YardstickOptions, yardstick_identity

    return yardstick_identity(settings.metrics, settings.yardsticks or YardstickOptions())


def check_yardsticks(run_dir: str | os.PathLike, settings: FolderSettings) -> bool:
    """Whether this run adds metrics to a run folder that measured fewer, the same way (run.json's
    settings.yardsticks then names them all, and the rows made before get them: `_add_metrics`). A UserError in
    one sentence, saying what to give, when the folder measured a metric this run leaves out (every row of a run has
    its metrics), or measured one another way (one run keeps one protocol)."""
    from .store import RunFolderError, read_info, record_settings

    old = read_info(run_dir)
    if old is None:
        return False
    had = (old.get("settings") or {}).get("yardsticks") or {}
    new = jsonable(yardsticks_identity(settings)) if settings.metrics else {}
    if had == new:
        return False
    had_metrics, new_metrics = list(had.get("metrics") or []), list(new.get("metrics") or [])
    changed = [k for k in had if k != "metrics" and k in new and had[k] != new[k]]
    if set(had_metrics) <= set(new_metrics) and not changed:
        record_settings(run_dir, yardsticks=new)
        return True
    given = " ".join(had_metrics)
    hint = f"Give another --out folder, or --metrics {given} (with the protocol options its run.json lists)."
    app_hint = "Choose another run folder, or the metrics it measured (its run.json lists them)."
    if not set(had_metrics) <= set(new_metrics):
        why = (f"measures {', '.join(had_metrics)} for every row (this run: {', '.join(new_metrics) or 'none'}), and a "
               "run keeps every metric it measured")
    else:
        flat_had, flat_new = _flat({k: had[k] for k in changed}), _flat({k: new[k] for k in changed})
        what = [f"{k} {flat_had.get(k)} (this run: {flat_new.get(k)})" for k in sorted(set(flat_had) | set(flat_new))
                if flat_had.get(k) != flat_new.get(k)]
        why = f"measured {', '.join(had_metrics)} another way ({'; '.join(what)}), and one run keeps one protocol"
    raise RunFolderError(f"The run folder {run_dir} {why}.", cli_hint=hint, app_hint=app_hint)


def _flat(record: dict, prefix: str = "") -> dict:
    """A nested record as {"protocol.step": 224, …}, for naming what differs."""
    out = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# --------------------------------------------------------------------------------------------
# How a chunk's maps are made: every method through its one interface.


def _for_this_run(method: Method, settings: FolderSettings) -> Method:
    """The method as this run runs it: a statistics folder given to the run goes to every method that reads
    statistics and names none itself (their `stats_images` setting)."""
    if settings.stats_images and "stats_images" in method.settings and not method.settings["stats_images"]:
        return method.with_settings(stats_images=settings.stats_images)
    return method


def is_bits_method(method: Method) -> bool:
    """Whether the method's maps are bits per pixel (the bottlenecks): total_bits, p_without and p_with apply."""
    return method.unit == "bits/pixel"


def error_text(err: BaseException, run_dir: str | os.PathLike, where: str = "") -> str:
    """An error as one sentence for a row: a user error's message; a bug said to be one, its traceback in the run
    folder's errors.log (`bug_log.row_error`). where: the row ("image · method")."""
    return row_error(err, run_dir, where)


# --------------------------------------------------------------------------------------------
# The loop.


#: One piece of an image's work: a method and the text prompt it explains ("" in a run without prompts).
Task = tuple[Method, str]


@dataclass(frozen=True)
class _Prompts:
    """A run's text prompts: all of them in run.json's order (a row's target is the index there) and each one's
    index among the network's prompts (what the methods and the network's outputs count by)."""

    texts: tuple[str, ...]
    network_index: dict[str, int]

    @classmethod
    def of_run(cls, network, texts: Sequence[str]) -> "_Prompts":
        from ..methods.base import check_target
        from ..methods.targets import PromptTarget

        # the one resolution of a prompt (`check_target`): the network's index, the prompt added where it lacks it
        return cls(tuple(texts), {t: check_target(network, PromptTarget(t)).index for t in texts})


def _checked_prompts(network, settings: FolderSettings) -> tuple[str, ...]:
    """The run's prompts, stripped, each once; a UserError in the user's words for an empty one, for prompts and a
    fixed class together, and (`PromptTarget` resolution) for prompts on a network that has none."""
    if not settings.prompts:
        from ..networks.clip_models import is_clip

        if is_clip(network):  # its outputs are the prompts' cosines: without prompts there is nothing to explain
            raise UserError("A CLIP model explains text prompts: give at least one.",
                            cli_hint="Give --prompt TEXT (once per prompt).",
                            app_hint="Type at least one prompt (one a line).")
        return ()
    from ..methods.base import check_target
    from ..methods.targets import PromptTarget

    prompts = tuple(dict.fromkeys(PromptTarget(p).text for p in settings.prompts))
    if settings.target is not None:
        raise UserError("Give text prompts or a class to explain, not both.")
    check_target(network, PromptTarget(prompts[0]))  # a classifier: says to explain a class instead
    return prompts


@dataclass
class _Loaded:
    item: ImageItem
    tasks: list[Task]
    x: torch.Tensor | None = None
    box: np.ndarray | None = None
    error: str | None = None


def _box_mask(boxes: Path | None, item: ImageItem, preprocess, shape: tuple[int, int]) -> np.ndarray | None:
    """The union of the image's object boxes on the crop, or None (no boxes folder, no box file, unreadable)."""
    if boxes is None:
        return None
    from ..metrics.bbox import boxes_on_crop, find_annotation, parse_voc

    xml = find_annotation(boxes, item.key)
    if xml is None:
        return None
    try:
        mask, _ = boxes_on_crop(parse_voc(xml), preprocess)
    except (UserError, OSError):  # an unreadable box file: the row has no box measures
        return None
    return mask if mask.shape == shape else None


def _load(network, item: ImageItem, tasks: list[Task], boxes: Path | None, run_dir: Path) -> _Loaded:
    pre = network.preprocess
    try:
        x = pre.normalise(pre.crop(pre.load(item.path)))
    except OSError as err:  # the disk's or the share's refusal (the loader says its own for missing files)
        return _Loaded(item, tasks, error=f"The file could not be read ({err.strerror or err}).")
    except Exception as err:  # noqa: BLE001 - any file that cannot be used is a row with the reason, not a crash
        return _Loaded(item, tasks, error=error_text(err, run_dir, f"image {item.key}"))
    return _Loaded(item, tasks, x, _box_mask(boxes, item, pre, tuple(x.shape[-2:])))


def _class_name(network, index: int | None) -> str | None:
    if index is None:
        return None
    name = getattr(network, "class_name", None)
    return name(index) if callable(name) else f"class {index}"


def _predictions(network, x: torch.Tensor) -> torch.Tensor:
    """(N, classes) probabilities of the unmodified network, under its head."""
    device = getattr(network, "device", None) or next(network.model.parameters()).device
    with frozen_eval(network.model), torch.no_grad():
        return probabilities(network.model(x.to(device)).float(), head_of(network)).cpu()


def _base_rows(network, loaded: list[_Loaded], fixed_target: int | None) -> list[dict]:
    """Per loaded image: image, label, target, class, prediction and probabilities (one network pass); a target
    the network has no output for marks the image with an error."""
    probs = _predictions(network, torch.cat([b.x for b in loaded]))
    rows = []
    for b, p in zip(loaded, probs):
        label = b.item.label
        predicted = int(p.argmax())
        target = fixed_target if fixed_target is not None else label if label is not None else predicted
        if not 0 <= target < p.numel():
            b.error = f"Class index {target} is out of range 0…{p.numel() - 1} for this network."
            target = predicted
        rows.append({
            "image": b.item.key, "label": label, "target": target, "class_name": _class_name(network, target),
            "predicted": predicted, "predicted_name": _class_name(network, predicted),
            "p_predicted": float(p[predicted]), "p_target": float(p[target]),
            "correct": None if label is None else predicted == label,
        })
    return rows


def _prompt_base_rows(network, loaded: list[_Loaded], prompts: _Prompts) -> list[dict[str, dict]]:
    """Per loaded image, for each of the run's prompts: the row's start (image, target = the prompt's index in the
    run, the prompt, its cosine similarity as p_target, the run's prompt most similar to the image as predicted),
    from one network pass. Folder labels name no prompt: label and correct stay empty."""
    sims = _predictions(network, torch.cat([b.x for b in loaded]))  # the similarity head: cosines
    columns = [prompts.network_index[t] for t in prompts.texts]
    out = []
    for b, s in zip(loaded, sims[:, columns]):
        best = int(s.argmax())
        out.append({text: {
            "image": b.item.key, "label": None, "target": j, "class_name": text, "prompt": text,
            "predicted": best, "predicted_name": prompts.texts[best], "p_predicted": float(s[best]),
            "p_target": float(s[j]), "correct": None,
        } for j, text in enumerate(prompts.texts)})
    return out


def _network_target(network, row) -> int:
    """The index a method explains for a stored row: its prompt's among the network's prompts, else its target."""
    prompt = row.get("prompt")  # a table row (a Series); None in a table written before prompts
    if isinstance(prompt, str) and prompt:
        return _Prompts.of_run(network, [prompt]).network_index[prompt]
    return int(row["target"])


class _Yardsticks:
    """The run's metrics per map (`metrics.yardsticks`): the scoring network built once per run (the metrics'
    `scoring_model`, fp32 like p_target, on the network's device), its head, the metrics and their options."""

    def __init__(self, network, settings: FolderSettings):
        from ..metrics.common import scoring_model
        from ..metrics.yardsticks import YardstickOptions, check_metrics

        self.metrics = check_metrics(settings.metrics)
        self.options = settings.yardsticks or YardstickOptions()
        self.model = scoring_model(network, "fp32")
        self.head = head_of(network)

    def columns(self, x: torch.Tensor, values: np.ndarray, target: int, box: np.ndarray | None, image: str,
                method: str, told: Callable[[str], None], metrics: Sequence[str] | None = None) -> dict:
        """The metric columns of one image's map. The map is scored as the run stores it (float16 with a scale,
        `store.encode_map`), so `Run.heatmap(row)` gives these numbers again; the tie-breaking order is seeded by
        the image and the method, so batches, shards and reruns agree. metrics: a part of the run's (default: all);
        the row's `metrics` column then names the run's."""
        from ..metrics.common import stable_seed
        from ..metrics.yardsticks import with_seed, yardstick_columns

        stored = decode_map(*encode_map(values))
        options = with_seed(self.options, stable_seed(self.options.seed, image, method))
        out: dict = yardstick_columns(self.model, x, stored, target, self.metrics if metrics is None else metrics,
                                      head=self.head, box_mask=box, options=options, told=told)
        out["metrics"] = " ".join(self.metrics)
        return out


def _method_rows(network, method: Method, loaded: list[_Loaded], base: list[dict], device, run_dir: Path,
                 yardsticks: _Yardsticks | None = None, told: Callable[[str], None] | None = None,
                 targets: list[int] | None = None) -> list[tuple[dict, np.ndarray | None]]:
    """(row, map) of `method` for each loaded image (`attribute_batch`), with the run's metric columns; a batch
    that fails is tried image by image, so one bad image costs one error row (as does a metric that fails).
    targets: the network's indices to explain (a prompt's); default each row's target."""
    x = torch.cat([b.x for b in loaded]).to(device)
    targets = [int(r["target"]) for r in base] if targets is None else list(targets)
    try:
        made: list = method.attribute_batch(network, x, targets)
    except Exception:  # noqa: BLE001 - find which image fails (or run smaller when memory ran out)
        made = []
        for i, target in enumerate(targets):
            try:
                made.extend(method.attribute_batch(network, x[i:i + 1], [target]))
            except Exception as err:  # noqa: BLE001 - one image's failure is its row's error
                made.append(err)
    out = []
    for i, (b, row, result) in enumerate(zip(loaded, base, made)):
        row = {**row, "method": method.key, "method_name": method.name}
        if isinstance(result, BaseException):
            out.append(({**row, "error": error_text(result, run_dir, f"image {b.item.key} · method {method.key}")},
                        None))
            continue
        values, extra = np.asarray(result.values, dtype=np.float32), result.extra
        if yardsticks is not None:
            def said(metric: str, _image=b.item.key) -> None:
                if told is not None:
                    told(f"{method.name} · {metric} · {_image}")

            try:
                row.update(yardsticks.columns(x[i:i + 1], values, targets[i], b.box, b.item.key, method.key,
                                              said))
            except Exception as err:  # noqa: BLE001 - one image's failure is its row's error, as for the map
                where = f"image {b.item.key} · method {method.key} · metrics"
                out.append(({**row, "error": f"the metrics failed: {error_text(err, run_dir, where)}"}, None))
                continue
        # seconds per image: a batched call's time split over its images (`Method._run`), so a column sum is the
        # method's time for the run, and a row is comparable across batch sizes
        row.update(seconds=float(result.seconds), precision=str(extra.get("precision", "fp32")), error=None,
                   **map_measures(values, b.box))
        if is_bits_method(method):
            row.update(total_bits=float(extra.get("total_bits", values.sum(dtype=np.float64))),
                       unlocated_bits=float(extra.get("unlocated_bits", 0.0)),
                       # the unmodified network's p(target): the row's one value (fp32, `_predictions`), not the
                       # method's own pass in its precision (bf16 gave 0.7621 beside p_target 0.7555)
                       p_without=row["p_target"],
                       p_with=float(extra.get("p_with", float("nan"))))
        out.append((row, values))
    return out


def _chunk_rows(network, chunk: list, methods: list[Method], runners: dict[str, Method], settings: FolderSettings,
                device, told: Callable[[str], None], run_dir: Path, yardsticks: _Yardsticks | None = None,
                prompts: _Prompts | None = None):
    """(row, map) of every pending (image, method, prompt) of `chunk`: an image that cannot be loaded, or whose
    target the network has no output for, gives an error row per task; the others go through each method in one
    batch per prompt (prompts: the run's, or None for a run that explains classes)."""
    loaded = [_load(network, item, pending, settings.boxes, run_dir) for item, pending in chunk]
    readable = [b for b in loaded if b.error is None]
    if not readable:
        base: dict[str, dict[str, dict]] = {}
    elif prompts is None:
        base = {b.item.key: {"": row} for b, row in zip(readable, _base_rows(network, readable, settings.target))}
    else:
        base = dict(zip((b.item.key for b in readable), _prompt_base_rows(network, readable, prompts)))
    for b in loaded:
        if b.error is not None:
            for m, prompt in b.tasks:
                start = base.get(b.item.key, {}).get(prompt) or {
                    "image": b.item.key, "label": b.item.label,
                    **({"prompt": prompt, "class_name": prompt, "target": prompts.texts.index(prompt)}
                       if prompt and prompts is not None else {})}
                yield {**start, "method": m.key, "method_name": m.name, "error": b.error}, None
    good = [b for b in loaded if b.error is None]
    for method in methods if good else []:
        for prompt in dict.fromkeys(p for b in good for m, p in b.tasks if m is method):
            mine_now = [b for b in good if (method, prompt) in b.tasks]
            told(f"{method.name} · {mine_now[0].item.key}" + (f" · {prompt}" if prompt else ""))
            targets = [prompts.network_index[prompt]] * len(mine_now) if prompt and prompts is not None else None
            yield from _method_rows(network, runners[method.key], mine_now,
                                    [base[b.item.key][prompt] for b in mine_now], device, run_dir, yardsticks, told,
                                    targets)


#: Seconds between two looks at images another live writer holds (its claims go when its part is written).
CLAIM_POLL_SECONDS = 1.0


def _grab(pending: list, size: int, claims: Claims, deferred: list):
    """Chunks of up to `size` (item, methods) of `pending` that this process could claim; the others (another live
    writer holds them) go to `deferred`. Claims are taken as chunks are asked for, not ahead of the work."""
    chunk = []
    for entry in pending:
        if claims.take(entry[0].key):
            chunk.append(entry)
            if len(chunk) == size:
                yield chunk
                chunk = []
        else:
            deferred.append(entry)
    if chunk:
        yield chunk


def _claimed_chunks(todo: list, size: int, claims: Claims, writer: PartWriter, left: Callable[[list], list],
                    summary: RunSummary):
    """The chunks of `todo` this process works on: each image claimed first, pairs written meanwhile by another
    process left out (`left`); images another live writer holds come last, once it lets them go. After each chunk
    the claims of the images whose rows are in a written part are released (a claim outlives the work until its
    rows are committed, so a second writer never redoes them)."""
    unwritten: list[str] = []  # claimed images whose rows wait in the writer
    pending = todo
    while pending:
        deferred: list = []
        worked = False
        for claimed in _grab(pending, size, claims, deferred):
            chunk = left(claimed)  # done by another writer between our first look and our claim
            claims.release(item.key for item, _ in claimed if all(item is not c[0] for c in chunk))
            summary.skipped += len(claimed) - len(chunk)
            if not chunk:
                continue
            worked = True
            parts_before = writer.parts
            yield chunk
            keys = [item.key for item, _ in chunk]
            if not writer.rows:  # the chunk ended with a part: every row so far is written
                claims.release(unwritten + keys)
                unwritten = []
            elif writer.parts != parts_before:  # a part was written within the chunk: the earlier chunks' rows
                claims.release(unwritten)
                unwritten = keys
            else:
                unwritten += keys
            claims.refresh()
        if deferred:  # before waiting for another writer, write what waits here and let its images go: else two
            writer.flush()  # writers could each wait for the other's claims forever
            claims.release(unwritten)
            unwritten = []
            if not worked:
                time.sleep(CLAIM_POLL_SECONDS)
        pending = left(deferred)
        summary.skipped += len(deferred) - len(pending)  # written by another process meanwhile


def _checked_methods(network, methods: Sequence[Method], settings: FolderSettings) -> list[Method]:
    """The run's methods, each once, after checking that they and the batch size can run here (UserError)."""
    if settings.batch_images < 1:
        raise UserError(f"Images per batch must be at least 1 (you gave {settings.batch_images}).")
    methods = list(dict((m.key, m) for m in methods).values())
    if not methods:
        raise UserError("Choose at least one attribution method.")
    for method in methods:
        reason = method.available_for(network)
        if reason:
            raise UserError(f"{method.name} cannot run here: {reason}")
    return methods


def _add_metrics(network, run_dir: Path, mine: Sequence[ImageItem], settings: FolderSettings,
                 yardsticks: _Yardsticks, writer: PartWriter, summary: RunSummary,
                 progress: ProgressFn | None) -> None:
    """Measure the metrics a run folder's earlier rows lack (a rerun that adds metrics, `check_yardsticks`), for
    this rank's images: each row's image is loaded again and its map read as stored, the missing metrics measured
    as a new run measures them, and the row written again with them (a new part; the table keeps the latest row)."""
    from .tables import open_run

    run = open_run(run_dir)
    keys = {item.key: item for item in mine}
    rows = run.table[run.table["error"].isna() & run.table["image"].isin(list(keys))]
    wanted = set(yardsticks.metrics)
    lacking = [(i, [m for m in yardsticks.metrics if m not in set(str(had or "").split())])
               for i, had in zip(rows.index, rows["metrics"].to_numpy(dtype=object, na_value=None))
               if not wanted <= set(str(had or "").split())]
    device = getattr(network, "device", None) or next(network.model.parameters()).device
    loaded: dict[str, _Loaded] = {}
    for done, (index, missing) in enumerate(lacking):
        row = run.table.loc[index]
        image, method = str(row["image"]), str(row["method"])
        if image not in loaded:
            loaded = {image: _load(network, keys[image], [], settings.boxes, run_dir)}  # rows come by image: one kept

        def said(metric: str) -> None:
            if progress is not None:
                progress(done, len(lacking), f"adding {metric} · {row['method_name']} · {image}")

        b = loaded[image]
        try:
            if b.error is not None:  # the image changed since (or went)
                raise UserError(b.error)
            values = run.heatmap(row)
            columns = yardsticks.columns(b.x.to(device), values, _network_target(network, row), b.box, image,
                                         method, said, missing)
        except Exception as err:  # noqa: BLE001 - the row stays as it was; the next rerun tries again
            summary.errors += 1
            if len(summary.error_examples) < 3:
                summary.error_examples.append(
                    f"{image}: the metrics could not be added ({error_text(err, run_dir, f'image {image} · {method}')})")
            continue
        kept = {k: v for k, v in row.to_dict().items()
                if k not in ("map_file", "map_index", "map_scale", "height", "width", "rank", "finished")}
        writer.add({**kept, **columns}, values)
        summary.measured += 1
    writer.flush()


def run_folder(
    network,
    items: Sequence[ImageItem],
    methods: Sequence[Method],
    run_dir: str | os.PathLike,
    settings: FolderSettings | None = None,
    *,
    root: str | os.PathLike | None = None,
    rank: int = 0,
    world: int = 1,
    progress: ProgressFn | None = None,
    check: bool = True,
) -> RunSummary:
    """Attribute this rank's share of `items` with every method not done yet, appending rows to `run_dir`.

    root: the folder the items' keys are relative to (recorded in run.json; default: the first item's folder).
    A run folder made with another network, weights, layer or settings is refused (`store.RunFolderError`)
    before any work. check: first remove dead writers' temp files and move damaged parts aside (`checks.heal`), so
    their rows are done again (a caller running one folder in many small calls checks on the first).
    Each image is claimed before its work (`claims.Claims`): a second process writing into the same folder takes
    only the images nobody holds, and waits for the rest to be written by their holder (or redoes them if it died).
    progress(done, total, label) counts this rank's images with work left.
    """
    settings = settings or FolderSettings()
    methods = _checked_methods(network, methods, settings)
    settings = replace(settings, prompts=_checked_prompts(network, settings))
    run_dir = Path(run_dir)
    if root is None:
        root = Path(items[0].path).parent if items else Path(".")
    if settings.metrics:
        from ..metrics.yardsticks import check_metrics

        settings = replace(settings, metrics=check_metrics(settings.metrics))
    adding = check_yardsticks(run_dir, settings)  # before the generic check: a sentence that says what to give
    info = start_run(run_dir, run_identity(network, methods, settings, root))
    # the run's prompts (its own first: the rows' targets index them), each resolved on the network once
    prompts = _Prompts.of_run(network, info["prompts"]) if settings.prompts else None
    damaged = [f"{d.part} ({d.reason})" for d in heal(run_dir)] if check else []

    seen: set[str] = set()
    done: set[tuple[str, str, str]] = set()

    def left(entries: list) -> list:
        """`entries` less the tasks in parts written since the last look (by this or another process)."""
        new = [n for n in part_names(run_dir) if n not in seen]
        seen.update(new)
        done.update(done_pairs(run_dir, errors=not settings.retry_errors, names=new))
        out = [(item, [(m, p) for m, p in pending if (item.key, m.key, p) not in done]) for item, pending in entries]
        return [(item, pending) for item, pending in out if pending]

    mine = shard(list(items), rank, world)
    tasks = [(m, p) for m in methods for p in settings.prompts or ("",)]
    todo = left([(item, tasks) for item in mine])
    summary = RunSummary(images=len(mine), skipped=len(mine) - len(todo), damaged=damaged)
    runners = {m.key: _for_this_run(m, settings) for m in methods}
    for key in dict.fromkeys(m.key for _, pending in todo for m, _ in pending):
        runners[key].prepare(network)  # statistics, a checkpoint: a problem stops the run before any image
    device = getattr(network, "device", None) or next(network.model.parameters()).device
    # rows made before without some of the metrics: just added to the run, or left by an interrupted rerun
    adding = bool(settings.metrics) and (adding or unmeasured(run_dir, settings.metrics, (i.key for i in mine)) > 0)
    yardsticks = _Yardsticks(network, settings) if settings.metrics and (todo or adding) else None
    writer = PartWriter(run_dir, rank, settings.part_rows, settings.part_seconds)
    if adding and yardsticks is not None:
        try:
            _add_metrics(network, run_dir, mine, settings, yardsticks, writer, summary, progress)
        finally:
            writer.flush()
    claims = Claims(run_dir)

    def keep(row: dict, values: np.ndarray | None) -> None:
        writer.add(row, values)
        summary.rows += 1
        if row.get("error"):
            summary.errors += 1
            if len(summary.error_examples) < 3:
                summary.error_examples.append(f"{row['image']}: {row['error']}")

    finished = 0

    def told(label: str) -> None:  # progress within a chunk: the images finished before it
        if progress is not None:
            progress(finished, len(todo), label)

    try:
        for chunk in _claimed_chunks(todo, settings.batch_images, claims, writer, left, summary):
            for row, values in _chunk_rows(network, chunk, methods, runners, settings, device, told, run_dir,
                                           yardsticks, prompts):
                keep(row, values)
            finished += len(chunk)
            if progress is not None:
                progress(finished, len(todo), chunk[-1][0].key)
    finally:  # also on Ctrl-C: what is finished is kept, then the claims go
        try:
            writer.flush()
        finally:
            claims.release_all()
        summary.parts = writer.parts
    return summary


def finish_run(run_dir: str | os.PathLike, rank: int = 0, world: int = 1):
    """After this rank's share: meet the other ranks (torchrun) and write the table (results.parquet) on rank 0;
    returns the table, or None on the other ranks. Without a rendezvous every rank writes it when done (the last
    one holds every part; `open_run` rebuilds a table that misses parts)."""
    met = meet_ranks(world)
    if met and rank != 0:
        print(f"rank {rank}: shard finished; rank 0 writes the table", file=sys.stderr)
        return None
    return write_table(run_dir)


__all__ = ["BATCH_IMAGES", "FolderSettings", "LIST_SUFFIX", "RunSummary", "finish_run", "is_bits_method",
           "list_images", "method_identity", "read_image_list", "run_folder", "run_identity"]
