"""A folder run's settings (`FolderSettings`), what a call did (`RunSummary`), and its identity in run.json:
what a later run into the same folder must share to add to it (network, weights, layer, settings, methods, the
metrics and their protocol; `check_yardsticks` lets a rerun add metrics, or measure another way a metric whose
every try failed, never drop one or change one that has results)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from ..jsonable import jsonable
from ..methods import Method
from .measures import THUMBNAIL
from .store import PART_ROWS, PART_SECONDS

if TYPE_CHECKING:
    from ..metrics.yardsticks import YardstickOptions

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
    metric_failures: int = 0  # maps a metric failed on (the map kept, the metric's columns blank)
    #: images scored without a box though the run has boxes, by reason (`rows.BOX_SKIPS`), and the first few
    #: sentences naming a bad box file
    box_skipped: dict[str, int] = field(default_factory=dict)
    box_warnings: list[str] = field(default_factory=list)
    box_images: set[str] = field(default_factory=set, repr=False)  # the images counted in box_skipped


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
    from .run_file import check_preprocess

    layers = [found[0] for found in (m.bottleneck_layers(network) for m in methods) if found]
    # how the maps lie on the images, in the bounds run.json is read back with (a card's crop and resize ranges)
    preprocess = {"resize": getattr(network.preprocess, "resize", None),
                  "crop": getattr(network.preprocess, "crop_size", None)}
    check_preprocess(preprocess)
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
        "preprocess": preprocess,
    }


def yardsticks_identity(settings: FolderSettings) -> dict:
    """run.json's record of the run's metrics and how they are measured (`metrics.yardsticks.yardstick_identity`):
    part of the run's identity, so rows measured two ways never share a table."""
    from ..metrics.yardsticks import YardstickOptions, yardstick_identity

    return yardstick_identity(settings.metrics, settings.yardsticks or YardstickOptions())


#: What `check_yardsticks` found: nothing to change, metrics added, or a failed metric's settings replaced.
SAME, ADDED, REPLACED = "", "added", "replaced"


def _owners(changed: Sequence[str], metrics: Sequence[str]) -> set[str]:
    """The metrics among `metrics` whose numbers the identity keys `changed` decide (the seed: all of them)."""
    from ..metrics import registry
    from ..metrics.yardsticks import YardstickOptions

    owners = {m for m in metrics for k in changed if k in registry.get(m).identity(YardstickOptions())}
    return set(metrics) if "seed" in changed or not owners else owners


def check_yardsticks(run_dir: str | os.PathLike, settings: FolderSettings) -> str:
    """How this run's metrics meet a run folder's (`SAME`, `ADDED`, `REPLACED`): it may add metrics to a folder that
    measured fewer the same way (run.json's settings.yardsticks then names them all, and the rows made before get
    them: `folder._add_metrics`), and it may measure another way a metric that has no result in the folder (every
    map it was tried on failed, e.g. a blur kernel too wide for the crop): run.json then records the new settings
    and the failed rows are done again. A UserError in one sentence, saying what to give, when the folder measured
    a metric this run leaves out (every row of a run has its metrics), or has results of one measured another way
    (one run keeps one protocol)."""
    from .store import RunFolderError, measured_metrics, read_info, record_settings

    old = read_info(run_dir)
    if old is None:
        return False
    had = (old.get("settings") or {}).get("yardsticks") or {}
    new = jsonable(yardsticks_identity(settings)) if settings.metrics else {}
    if had == new:
        return SAME
    had_metrics, new_metrics = list(had.get("metrics") or []), list(new.get("metrics") or [])
    changed = [k for k in had if k != "metrics" and k in new and had[k] != new[k]]
    if set(had_metrics) <= set(new_metrics) and not changed:
        record_settings(run_dir, yardsticks=new)
        return ADDED
    if set(had_metrics) <= set(new_metrics) and not _owners(changed, had_metrics) & measured_metrics(run_dir):
        record_settings(run_dir, yardsticks=new)  # no result was measured the old way: nothing mixes
        return REPLACED
    given = " ".join(had_metrics)
    hint = (f"Give another --out folder to start over, or --metrics {given} with the protocol options its run.json "
            "lists.")
    app_hint = "Choose another run folder to start over, or the metrics it measured (its run.json lists them)."
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


__all__ = ["ADDED", "BATCH_IMAGES", "FolderSettings", "REPLACED", "RunSummary", "SAME", "check_yardsticks", "method_identity", "run_identity",
           "yardsticks_identity"]
