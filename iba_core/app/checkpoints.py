"""Readout checkpoints the app offers: the one shipped for a network and those found in the cache folders,
each with a label that says what it was trained on."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..settings import cache_dir


@dataclass
class ReadoutCheckpoint:
    path: Path
    shipped: bool
    model: str
    trained_on: str  # what the readout was trained on, from the checkpoint's training metadata
    complete: bool | None  # training finished (None: unknown)
    error: str = ""  # why it cannot be used, if it cannot

    @property
    def label(self) -> str:
        """Short, for lists and cell titles: "Readout (shipped, rough)" or "Readout (<file>)"."""
        return "Readout (shipped, rough)" if self.shipped else f"Readout ({self.path.name})"

    @property
    def details(self) -> str:
        """The rest, for a tooltip or caption: what it was trained on, its state and file."""
        text = f"Trained on {self.trained_on}."
        if self.shipped:
            text += " Shipped with the app: a rough readout trained offline on a few photos, not on ImageNet."
        elif self.complete is not None:
            text += " Training complete." if self.complete else " Training unfinished."
        return f"{text} File: {self.path}."

    @property
    def state(self) -> str:
        """'shipped', 'complete', 'training unfinished' or '' (unknown)."""
        if self.shipped:
            return "shipped"
        if self.complete is None:
            return ""
        return "complete" if self.complete else "training unfinished"

    def method_settings(self) -> dict:
        """Settings of the registered "readout" method that make it use this checkpoint."""
        return {"checkpoint": str(self.path)}


def readout_dirs() -> list[Path]:
    """Folders searched for trained readouts: <cache>/readout and ./readout_runs (the trainer's default)."""
    return [cache_dir() / "readout", Path("readout_runs")]


def describe_readout(path: Path, shipped: bool) -> ReadoutCheckpoint:
    """What the checkpoint at `path` was trained for and on; `error` says why it cannot be used."""
    from ..readout import ReadoutCheckpointError, load_checkpoint

    try:
        ckpt = load_checkpoint(path)
    except ReadoutCheckpointError as err:
        return ReadoutCheckpoint(path, shipped, "?", "unknown data", None, str(err))
    training = ckpt.get("training") or {}
    data = str(training.get("data") or "").strip()
    if not data:
        cfg = training.get("config") or {}
        data = f"images in {cfg['images']}" if cfg.get("images") else "the offline sample photos"
    epoch = training.get("epoch")
    if epoch is not None:
        data += f"; {epoch} epoch(s)"
    complete = training.get("complete")
    return ReadoutCheckpoint(path, shipped, str(ckpt["config"].get("model", "?")), data,
                             None if complete is None else bool(complete))


def readout_checkpoints(model_key: str, dirs: Iterable[Path] | None = None,
                        aliases: Iterable[str] = ()) -> list[ReadoutCheckpoint]:
    """The shipped readout for `model_key` (first, if any), then *.pt files found below `dirs` made for it
    (checkpoints that name the network by one of `aliases`, e.g. its model card's path, count too)."""
    names = {model_key, *(a for a in aliases if a)}
    from ..readout import default_checkpoint

    found: list[ReadoutCheckpoint] = []
    shipped = default_checkpoint(model_key)
    if shipped is not None:
        found.append(describe_readout(shipped, True))
    seen = {p.path.resolve() for p in found}
    for d in readout_dirs() if dirs is None else dirs:
        d = Path(d).expanduser()
        if not d.is_dir():
            continue
        for path in sorted(d.rglob("*.pt")):
            if path.resolve() in seen:
                continue
            seen.add(path.resolve())
            info = describe_readout(path, False)
            if info.model in names:
                found.append(info)
    return found


def readout_training_command(network, source: str = "") -> str:
    """The command that trains a Readout Bottleneck for `network` into a folder the app searches.

    source: what the network was loaded from (a model card's path; default its key). Images: the model
    card's statistics folder if it names one (the training needs the network's own kind of images).
    """
    spec = network.spec
    model = source or network.key
    images = getattr(spec, "stats_images", None) or "YOUR_IMAGES"
    name = network.key.split(":", 1)[-1]
    return (f"python -m iba_core train-readout --model {shlex.quote(model)} --images {shlex.quote(images)} "
            f"--out {shlex.quote('readout_runs/' + name)}")
