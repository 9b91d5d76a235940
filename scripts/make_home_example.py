"""Precompute the Home page's example: chelsea through the offline network, saved to assets/.

Writes assets/home_example.png (photo | overlay | "not needed" view, one strip, < 200 KB) and
assets/home_example.json (the run report). Run from the repository root:

    python scripts/make_home_example.py [--samples 1000]
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]

from iba_core.app.choices import DEFAULT_THRESHOLD  # noqa: E402
from iba_core.app.statistics import choose_stats  # noqa: E402
from iba_core.images import load_sample  # noqa: E402
from iba_core.networks import DEFAULT_NETWORK, load_network  # noqa: E402
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck  # noqa: E402
from iba_core.render import overlays  # noqa: E402
from iba_core.render.report import run_report  # noqa: E402

MAX_BYTES = 200_000


def strip(*images: Image.Image, gap: int = 6) -> Image.Image:
    """Images side by side on white."""
    w = sum(i.width for i in images) + gap * (len(images) - 1)
    out = Image.new("RGB", (w, max(i.height for i in images)), "white")
    x = 0
    for im in images:
        out.paste(im, (x, 0))
        x += im.width + gap
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1000, help="crops behind the layer statistics")
    parser.add_argument("--out", type=Path, default=ROOT / "assets")
    args = parser.parse_args()

    loaded = load_network(DEFAULT_NETWORK)
    layer = loaded.spec.default_layer
    cropped = loaded.preprocess.crop(load_sample("chelsea"))
    stats = choose_stats(loaded, layer, n=args.samples, progress=lambda d, t, _label: print(f"\rstatistics {d}/{t}", end=""))
    print()
    settings = BottleneckSettings()
    iba = PerSampleBottleneck.for_network(loaded, layer, stats, settings)
    result = iba.attribute(loaded.preprocess.normalise(cropped))

    picture = strip(
        cropped,
        overlays.overlay_image(cropped, result.heatmap, opacity=0.7),
        overlays.not_needed_outline(cropped, result.heatmap, DEFAULT_THRESHOLD),
    )
    args.out.mkdir(parents=True, exist_ok=True)
    png = args.out / "home_example.png"
    data = overlays.png_bytes(picture)
    if len(data) > MAX_BYTES:  # a 256-colour palette keeps photos and heatmaps crisp at a third of the size
        data = overlays.png_bytes(picture.quantize(256, method=Image.Quantize.MEDIANCUT).convert("RGB").quantize(256))
    png.write_bytes(data)
    report = run_report(settings, result, loaded.key, layer, "chelsea", loaded.categories[result.target],
                        stats_description=stats.describe())
    report["threshold_bits"] = DEFAULT_THRESHOLD
    report["not_needed_fraction"] = overlays.not_needed_fraction(result.heatmap, DEFAULT_THRESHOLD)
    (args.out / "home_example.json").write_text(json.dumps(report, indent=2))
    print(f"{png} ({len(data) / 1000:.0f} kB): {result.total_bits:,.0f} bits, "
          f"p {result.p_without:.2f} → {result.p_with:.2f}")


if __name__ == "__main__":
    main()
