"""The concept benchmark's docs block and photos (benchmarks/bench_concepts.py), no timing: docs/concepts.md's figures
are what the benchmark's writer makes from its stored results (never typed by hand), the writer touches only its
block, and the benchmark's photos are real, varied and in two class folders."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_concepts  # noqa: E402

ROW = {"path": "NMF", "images": 64, "groups": 3, "k": "all:4 class-281:5 class-812:3", "seconds": 90.5,
       "per_1000_images_s": 1414.1, "fit_pass_s": 50.2, "nmf_s": 30.1, "measure_pass_s": 40.3,
       "measure_compute_s": 20.0, "estimate_s": 100.0, "measured_over_estimate": 0.9, "peak_rss_mib": 1300.5,
       "baseline_rss_mib": 800.0, "added_rss_mib": 500.5, "added_per_1000_images_mib": 7820.3, "gpu_peak_mib": None}
HEADER = {"arguments": "--images 64 --stream", "date": "2026-11-29", "machine": "Some CPU | torch 2 | 2 threads",
          "load_before": "0.10 0.20 0.30", "load_after": "1.00 0.90 0.50", "model": "efficientnet_lite0",
          "images": 64, "baseline_rss_mib": 800.0, "estimate_took_s": 5.2}


def test_the_docs_block_is_what_the_benchmark_writes_from_its_stored_figures():
    page = bench_concepts.DOCS.read_text(encoding="utf-8")
    stored = bench_concepts.RESULTS
    results = json.loads(stored.read_text(encoding="utf-8")) if stored.exists() else None
    assert page.count(bench_concepts.BEGIN) == 1 and page.count(bench_concepts.END) == 1
    assert bench_concepts.page_part(page) == bench_concepts.markdown(results)


def test_the_writer_replaces_only_its_block_and_shows_every_figure(tmp_path):
    page = tmp_path / "page.md"
    before, after = "# Title\n\nText before.\n\n", "\n\nText after.\n"
    page.write_text(f"{before}{bench_concepts.BEGIN}\nold figures\n{bench_concepts.END}{after}", encoding="utf-8")
    results = {"header": HEADER, "rows": [ROW, dict(ROW, path="MiniBatchNMF (streamed)", seconds=120.0)]}
    bench_concepts.write_docs(results, page)
    text = page.read_text(encoding="utf-8")
    assert text.startswith(before + bench_concepts.BEGIN) and text.endswith(bench_concepts.END + after)
    assert "old figures" not in text
    block = bench_concepts.page_part(text)
    table = [line for line in block.splitlines() if line.startswith("| ")]
    assert len(table) == 3  # the heading and one row per path
    assert "GPU peak" not in table[0]  # no GPU figures, no GPU column
    assert table[1].startswith("| NMF | 3 | all:4 class-281:5 class-812:3 | 90.5 | 1414.1 |")
    assert "| 120.0 |" in table[2] and "--images 64 --stream" in block and "load average 0.10 0.20 0.30" in block
    bench_concepts.write_docs(results, page)  # rewriting gives the same page
    assert page.read_text(encoding="utf-8") == text
    bench_concepts.write_docs({"header": HEADER, "rows": [dict(ROW, gpu_peak_mib=2048.0)]}, page)
    assert "GPU peak MiB" in page.read_text(encoding="utf-8") and "| 2048.0 |" in page.read_text(encoding="utf-8")


def test_the_photos_are_varied_real_photos_in_two_class_folders(tmp_path):
    bench_concepts.write_photos(tmp_path, 8)
    folders = sorted(p.name for p in tmp_path.iterdir())
    assert folders == sorted(bench_concepts.CLASSES)
    files = sorted(tmp_path.glob("*/*.png"))
    assert len(files) == 8 and all(len(list((tmp_path / c).glob("*.png"))) == 4 for c in bench_concepts.CLASSES)
    pixels = [np.asarray(Image.open(f).convert("RGB").resize((32, 32)), dtype=np.float32) for f in files]
    # no two alike, though photos repeat every len(sample photos) images (crops, flips and turns differ)
    assert min(np.abs(a - b).mean() for i, a in enumerate(pixels) for b in pixels[i + 1:]) > 1.0
    assert all(max(Image.open(f).size) == 320 for f in files)
    again = tmp_path / "again"
    bench_concepts.write_photos(again, 2)  # seeded: the same photos on every run (a kept run resumes)
    assert (again / bench_concepts.CLASSES[0] / "photo_00000.png").read_bytes() == \
        (tmp_path / bench_concepts.CLASSES[0] / "photo_00000.png").read_bytes()
