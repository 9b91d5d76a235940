"""The shipped examples, from the current code: the Home page's example and the docs' CLI example.

One script, so that the numbers users read agree with what the code computes:

- assets/home_example.png: photo | overlay | "not needed" view, one strip (< 200 KB);
- assets/home_example.json: the run report the Home page reads its numbers from, plus the heatmap mean-pooled
  over 4 × 4 pixels (for tests/test_examples.py, which reruns the example and compares);
- assets/cli_example.json: the line `python -m iba_core attribute chelsea.jpg --precision fp32` prints, for
  scikit-image's chelsea saved as JPEG with quality 95 — and the example block of DOCS_PAGE (between
  `<!-- cli-example -->` and `<!-- /cli-example -->`) set to that line.

Both run the paper's defaults (β = 10/k, 10 steps, batch 10, seed 0) in fp32 ("auto" may pick bf16 on CPUs
that have it) with 1000-sample statistics (the shipped ones), read from a fresh cache folder so that no
earlier cached statistics leak in. fp32 results still differ across processes at the ~0.1 % level (kernel
choices), so a rerun matches the shipped numbers closely, not bit for bit. From the repository root:

    python scripts/make_home_example.py [--samples 1000] [--no-docs]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from iba_core.app.choices import DEFAULT_THRESHOLD  # noqa: E402
from iba_core.app.stats_source import choose_stats  # noqa: E402
from iba_core.images import load_sample  # noqa: E402
from iba_core.networks import DEFAULT_NETWORK, load_network  # noqa: E402
from iba_core.per_sample import AttributionResult, BottleneckSettings, PerSampleBottleneck  # noqa: E402
from iba_core.render import overlays  # noqa: E402
from iba_core.render.arrays import downsample  # noqa: E402
from iba_core.render.report import run_report  # noqa: E402
from iba_core.settings import CACHE_DIR_ENV, RECOMMENDED_SAMPLES, STATS_SAMPLES_ENV  # noqa: E402

MAX_BYTES = 200_000
SAMPLE = "chelsea"
#: The docs' CLI example: the sample saved as this file, with this JPEG quality.
CLI_IMAGE, JPEG_QUALITY = "chelsea.jpg", 95
CLI_ARGS = ("--precision", "fp32")
#: The paper's defaults in fp32: reproducible up to the cross-process level.
SETTINGS = BottleneckSettings(precision="fp32")
#: The heatmap kept in home_example.json, mean-pooled over POOL × POOL pixels.
POOL = 4
#: Seeds of the example's spread (Home: total bits vary with the seed; the example itself is seed 0).
SPREAD_SEEDS = range(5)
#: The docs page that shows the CLI example, between these markers.
DOCS_PAGE = ROOT / "docs" / "guide" / "cli" / "attribute.md"
DOCS_START, DOCS_END = "<!-- cli-example -->", "<!-- /cli-example -->"


def strip(*images: Image.Image, gap: int = 6) -> Image.Image:
    """Images side by side on white."""
    w = sum(i.width for i in images) + gap * (len(images) - 1)
    out = Image.new("RGB", (w, max(i.height for i in images)), "white")
    x = 0
    for im in images:
        out.paste(im, (x, 0))
        x += im.width + gap
    return out


def home_run(samples: int = RECOMMENDED_SAMPLES, progress=None) -> tuple[dict, AttributionResult, Image.Image]:
    """The Home example, computed now: (report, result, the 224 × 224 crop). The report is what
    home_example.json holds."""
    network = load_network(DEFAULT_NETWORK)
    layer = network.spec.default_layer
    cropped = network.preprocess.crop(load_sample(SAMPLE))
    stats = choose_stats(network, layer, n=samples, progress=progress)
    x = network.preprocess.normalise(cropped)
    result = PerSampleBottleneck.for_network(network, layer, stats, SETTINGS).attribute(x)
    totals = [result.total_bits if seed == SETTINGS.seed else PerSampleBottleneck.for_network(
        network, layer, stats, dataclasses.replace(SETTINGS, seed=seed)).attribute(x, result.target).total_bits
        for seed in SPREAD_SEEDS]
    report = run_report(SETTINGS, result, network.key, layer, SAMPLE, network.categories[result.target],
                        stats_description=stats.describe())
    report["threshold_bits"] = DEFAULT_THRESHOLD
    # what one refit with another seed moves the total by: the precision a reader can give the number
    report["seed_spread"] = {"seeds": list(SPREAD_SEEDS), "total_bits": [round(float(t), 1) for t in totals],
                             "mean": round(float(np.mean(totals)), 1), "sd": round(float(np.std(totals, ddof=1)), 1)}
    report["not_needed_fraction"] = overlays.not_needed_fraction(result.heatmap, DEFAULT_THRESHOLD)
    pooled = downsample(np.asarray(result.heatmap, dtype=np.float32), POOL)
    report["heatmap_pooled"] = {
        "pool": POOL,
        "unit": f"bits per input pixel, mean over {POOL} × {POOL} pixels",
        "values": [[float(f"{v:.4g}") for v in row] for row in pooled.tolist()],
    }
    return report, result, cropped


def report_text(report: dict) -> str:
    """The report as indented JSON with every list of numbers on one line (the pooled heatmap: a row a line)."""
    text = json.dumps(report, indent=2, ensure_ascii=False)
    return re.sub(r"\[\s+([-+0-9.eE,\s]+?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"


def home_picture(cropped: Image.Image, heatmap: np.ndarray) -> bytes:
    """Photo | overlay | "not needed" view as PNG bytes under MAX_BYTES."""
    picture = strip(
        cropped,
        overlays.overlay_image(cropped, heatmap, opacity=0.7, legend=True),  # 0 – its top in bits / pixel
        overlays.not_needed_outline(cropped, heatmap, DEFAULT_THRESHOLD),
    )
    data = overlays.png_bytes(picture)
    if len(data) > MAX_BYTES:  # a 256-colour palette keeps photos and heatmaps crisp at a third of the size
        data = overlays.png_bytes(picture.quantize(256, method=Image.Quantize.MEDIANCUT).convert("RGB").quantize(256))
    return data


def cli_line(workdir: Path, cache: Path | None = None) -> str:
    """The JSON line `python -m iba_core attribute chelsea.jpg --precision fp32` prints for the sample saved as
    JPEG (quality 95) in `workdir`, run there with this checkout's iba_core and the cache folder `cache`."""
    import skimage.data

    workdir.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.ascontiguousarray(skimage.data.chelsea())).save(workdir / CLI_IMAGE, quality=JPEG_QUALITY)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path}  # this checkout's iba_core, whatever is installed
    env.pop(STATS_SAMPLES_ENV, None)  # a new user's defaults: `attribute` honours IBA_STATS_SAMPLES like every run
    if cache is not None:
        env[CACHE_DIR_ENV] = str(cache)
    done = subprocess.run([sys.executable, "-m", "iba_core", "attribute", CLI_IMAGE, *CLI_ARGS], cwd=workdir,
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the CLI failed ({done.returncode}):\n{done.stderr[-3000:]}")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    json.loads(lines[-1])  # one JSON line
    return lines[-1].strip()


def docs_block(line: str) -> str:
    """The docs' example block for `line` (between the markers, markers included)."""
    return f"{DOCS_START}\n```json\n{line}\n```\n{DOCS_END}"


def update_docs(line: str, page: Path = DOCS_PAGE) -> bool:
    """Set the page's example block (between the markers) to `line`; False when the markers are missing."""
    text = page.read_text(encoding="utf-8")
    start, end = text.find(DOCS_START), text.find(DOCS_END)
    if start < 0 or end < start:
        return False
    page.write_text(text[:start] + docs_block(line) + text[end + len(DOCS_END):], encoding="utf-8")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=RECOMMENDED_SAMPLES, help="samples behind the statistics")
    parser.add_argument("--out", type=Path, default=ROOT / "assets")
    parser.add_argument("--no-docs", action="store_true", help="leave the docs' example block as it is")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="iba-example-") as tmp:
        os.environ[CACHE_DIR_ENV] = str(Path(tmp) / "cache")  # fresh: the shipped statistics, nothing older
        report, result, cropped = home_run(
            args.samples, progress=lambda d, t, _label: print(f"\rstatistics {d}/{t}", end="", file=sys.stderr))
        args.out.mkdir(parents=True, exist_ok=True)
        png = home_picture(cropped, result.heatmap)
        (args.out / "home_example.png").write_bytes(png)
        (args.out / "home_example.json").write_text(report_text(report), encoding="utf-8")
        print(f"home example: {len(png) / 1000:.0f} kB, {result.total_bits:,.0f} bits, "
              f"p {result.p_without:.3f} → {result.p_with:.3f}")

        line = cli_line(Path(tmp) / "cli", Path(tmp) / "cache")
    (args.out / "cli_example.json").write_text(line + "\n")
    print(f"CLI example: {line}")
    if not args.no_docs:
        done = "updated" if update_docs(line) else "not found (no markers)"
        print(f"{DOCS_PAGE.relative_to(ROOT)} example block {done}")


if __name__ == "__main__":
    main()
