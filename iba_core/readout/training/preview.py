"""Per-epoch preview: one image next to its readout heatmap, to watch training progress."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ...images import ImageError, load_sample
from ...cache import write_atomic
from ..bottleneck import ReadoutBottleneck
from .config import TrainConfig
from .data import ImageFolderDataset

#: Preview image when training on the sample photos.
PREVIEW_SAMPLE = "chelsea"


def preview_image(cfg: TrainConfig, dataset, network):
    """The cropped preview image: cfg.preview, else the first readable folder image, else the sample photo."""
    if cfg.preview:
        return network.preprocess.crop(network.preprocess.load(cfg.preview))
    if isinstance(dataset, ImageFolderDataset):
        for path in dataset.files:
            try:
                return network.preprocess.crop(network.preprocess.load(path))
            except (ImageError, OSError):
                continue
    return network.preprocess.crop(load_sample(PREVIEW_SAMPLE))


def save_preview(rb: ReadoutBottleneck, cropped, path: Path, title: str = "") -> dict:
    """The cropped image next to its readout heatmap (colour-mapped, normalised to its max)."""
    from PIL import Image, ImageDraw

    x = rb.network.preprocess.normalise(cropped)
    heat = rb.heatmap(x)
    try:
        from ...render.overlays import colorize, overlay_image

        right = Image.fromarray(colorize(heat))
        middle = overlay_image(cropped, heat)
    except ImportError:  # plotting extras missing: a grey-scale map still shows the result
        g = (255 * heat / max(float(heat.max()), 1e-12)).astype(np.uint8)
        right = middle = Image.fromarray(g).convert("RGB")
    w, h = cropped.size
    canvas = Image.new("RGB", (3 * w, h + 18), "white")
    for i, im in enumerate((cropped, middle, right.resize((w, h)))):
        canvas.paste(im.convert("RGB"), (i * w, 18))
    ImageDraw.Draw(canvas).text((4, 3), f"{title}  total {heat.sum():.0f} bits, max {heat.max():.3f} bits/px",
                                fill="black")
    write_atomic(path, lambda tmp: canvas.save(tmp, format="PNG"))
    return {"total_bits": float(heat.sum()), "max_bits_per_pixel": float(heat.max())}
