"""How a chunk of a folder run's images becomes rows: every method through its one interface.

Per chunk of `FolderSettings.batch_images` images: each image is loaded and preprocessed (a file that cannot be
read, or does not suit the network, becomes an error row for each method), the network runs once on the chunk (the
top-1 class, its probability, p(target)), then each method makes its maps through `method.attribute_batch` (the
bottlenecks, Readout, gradient, CAM and LRP methods batch for real; the others run image by image). A method that
fails on a batch is tried image by image, so one bad image costs one error row. A row a bug failed (anything but a
`UserError`) says "a bug" with a reference, its traceback in RUN_DIR/errors.log (`bug_log`); a row the user's file
or choice failed keeps that sentence. Each map gets the run's metric columns (`metric_columns.Yardsticks`).

The target: `FolderSettings.target` when given, else the image's label, else the network's top-1 class. With text
prompts (`FolderSettings.prompts`, a CLIP network): one row per image × method × prompt, the prompt in the row's
`prompt` column and its index in the run's prompts (run.json's `prompts`, which a later run may add to) as the
row's target; p_target is the cosine similarity of the image with the prompt, and the row's "predicted" the run's
prompt most similar to the image.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from ..errors import UserError
from ..heads import head_of, probabilities
from ..image_folders import ImageItem
from ..methods import Method
from ..methods.base import device_of
from ..model_state import frozen_eval
from .bug_log import row_error
from .measures import BOX_INVERTED, BOX_OUTSIDE, BOX_UNREADABLE, NO_BOX_FILE, map_measures
from .metric_columns import Yardsticks
from .run_settings import FolderSettings


def for_this_run(method: Method, stats_images: str | None) -> Method:
    """The method as a run with the statistics folder `stats_images` runs it: the folder goes to every method that
    reads statistics and names none itself (their `stats_images` setting); the Dataset page's time estimate asks the
    same."""
    if stats_images and "stats_images" in method.settings and not method.settings["stats_images"]:
        return method.with_settings(stats_images=stats_images)
    return method


def is_bits_method(method: Method) -> bool:
    """Whether the method's maps are bits per pixel (the bottlenecks): total_bits, p_without and p_with apply."""
    return method.unit == "bits/pixel"


def error_text(err: BaseException, run_dir: str | os.PathLike, where: str = "") -> str:
    """An error as one sentence for a row: a user error's message; a bug said to be one, its traceback in the run
    folder's errors.log (`bug_log.row_error`). where: the row ("image · method")."""
    return row_error(err, run_dir, where)


#: One piece of an image's work: a method and the text prompt it explains ("" in a run without prompts).
Task = tuple[Method, str]


@dataclass(frozen=True)
class Prompts:
    """A run's text prompts: all of them in run.json's order (a row's target is the index there) and each one's
    index among the network's prompts (what the methods and the network's outputs count by)."""

    texts: tuple[str, ...]
    network_index: dict[str, int]

    @classmethod
    def of_run(cls, network, texts: Sequence[str]) -> "Prompts":
        """The run's prompts, each resolved on the network once."""
        from ..methods.base import check_target
        from ..methods.targets import PromptTarget

        # the one resolution of a prompt (`check_target`): the network's index, the prompt added where it lacks it
        return cls(tuple(texts), {t: check_target(network, PromptTarget(t)).index for t in texts})


def checked_prompts(network, settings: FolderSettings) -> tuple[str, ...]:
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
class Loaded:
    """An image of a chunk as loaded: its pending tasks, its preprocessed tensor and object boxes, or why not;
    `box_skipped`: why a run with boxes has none for it (`box_mask`)."""

    item: ImageItem
    tasks: list[Task]
    x: torch.Tensor | None = None
    box: np.ndarray | None = None
    error: str | None = None
    box_skipped: str | None = None


def box_mask(boxes: Path | None, item: ImageItem, preprocess,
             shape: tuple[int, int]) -> tuple[np.ndarray | None, str | None]:
    """(the union of the image's object boxes on the crop, None) or (None, why not: a reason of
    `measures.BOX_SKIPS`, then the
    box file and its fault); (None, None) without a boxes folder. One bad file skips its image's box scores, never
    the run."""
    if boxes is None:
        return None, None
    from ..metrics.bbox import InvertedBoxError, boxes_on_crop, find_annotation, parse_voc
    from ..trust import shown

    xml = find_annotation(boxes, item.key)
    if xml is None:
        return None, NO_BOX_FILE
    name = shown(Path(xml).name, 80)
    try:
        mask, _ = boxes_on_crop(parse_voc(xml), preprocess)
    except InvertedBoxError as err:
        return None, f"{BOX_INVERTED}: {name} ({shown(err, 160)})"
    except (UserError, OSError, UnicodeDecodeError) as err:  # empty, cut short, not XML, unreadable
        said = err.strerror if isinstance(err, OSError) and err.strerror else err
        return None, f"{BOX_UNREADABLE}: {name} ({shown(said, 160)})"
    if mask.shape != shape or not mask.any():
        return None, f"{BOX_OUTSIDE}: {name}"
    return mask, None


def load_image(network, item: ImageItem, tasks: list[Task], boxes: Path | None, run_dir: Path) -> Loaded:
    """The image preprocessed for the network, with its boxes on the crop; a file that cannot be used, its reason."""
    pre = network.preprocess
    try:
        x = pre.normalise(pre.crop(pre.load(item.path)))
    except OSError as err:  # the disk's or the share's refusal (the loader says its own for missing files)
        return Loaded(item, tasks, error=f"The file could not be read ({err.strerror or err}).")
    except Exception as err:  # noqa: BLE001 - any file that cannot be used is a row with the reason, not a crash
        return Loaded(item, tasks, error=error_text(err, run_dir, f"image {item.key}"))
    mask, skipped = box_mask(boxes, item, pre, tuple(x.shape[-2:]))
    return Loaded(item, tasks, x, mask, box_skipped=skipped)


def _class_name(network, index: int | None) -> str | None:
    """The network's name for a class index (None for none)."""
    if index is None:
        return None
    name = getattr(network, "class_name", None)
    return name(index) if callable(name) else f"class {index}"


def _predictions(network, x: torch.Tensor) -> torch.Tensor:
    """(N, classes) probabilities of the unmodified network, under its head."""
    device = device_of(network)
    with frozen_eval(network.model), torch.no_grad():
        return probabilities(network.model(x.to(device)).float(), head_of(network)).cpu()


def _base_rows(network, loaded: list[Loaded], fixed_target: int | None) -> list[dict]:
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


def _prompt_base_rows(network, loaded: list[Loaded], prompts: Prompts) -> list[dict[str, dict]]:
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


def network_target(network, row) -> int:
    """The index a method explains for a stored row: its prompt's among the network's prompts, else its target."""
    prompt = row.get("prompt")  # a table row (a Series); None in a table written before prompts
    if isinstance(prompt, str) and prompt:
        return Prompts.of_run(network, [prompt]).network_index[prompt]
    return int(row["target"])


def _method_rows(network, method: Method, loaded: list[Loaded], base: list[dict], device, run_dir: Path,
                 yardsticks: Yardsticks | None = None, told: Callable[[str], None] | None = None,
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
        row = {**row, "method": method.key, "method_name": method.name, "box_skipped": b.box_skipped}
        if isinstance(result, BaseException):
            out.append(({**row, "error": error_text(result, run_dir, f"image {b.item.key} · method {method.key}")},
                        None))
            continue
        values, extra = np.asarray(result.values, dtype=np.float32), result.extra
        if yardsticks is not None:
            def said(metric: str, _image=b.item.key) -> None:
                if told is not None:
                    told(f"{method.name} · {metric} · {_image}")

            # a metric that fails blanks its own columns and says why (`metric_errors`): the map is kept
            row.update(yardsticks.columns(x[i:i + 1], values, targets[i], b.box, b.item.key, method.key, said))
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


def chunk_rows(network, chunk: list, methods: list[Method], runners: dict[str, Method], settings: FolderSettings,
                device, told: Callable[[str], None], run_dir: Path, yardsticks: Yardsticks | None = None,
                prompts: Prompts | None = None):
    """(row, map) of every pending (image, method, prompt) of `chunk`: an image that cannot be loaded, or whose
    target the network has no output for, gives an error row per task; the others go through each method in one
    batch per prompt (prompts: the run's, or None for a run that explains classes)."""
    loaded = [load_image(network, item, pending, settings.boxes, run_dir) for item, pending in chunk]
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


__all__ = ["Loaded", "Prompts", "Task", "box_mask", "checked_prompts", "chunk_rows", "error_text", "for_this_run",
           "is_bits_method", "load_image", "network_target"]
