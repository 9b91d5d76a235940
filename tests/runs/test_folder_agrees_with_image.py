"""`attribute IMG` and `attribute FOLDER` decide statistics and precision by one policy each, so one photo gets the
same bits either way, and both outputs say the precision (issue #26.2)."""
from __future__ import annotations

import json

import pytest

from iba_core import precision
from iba_core.cli import main

from hardware import CPU_KINDS
from run_fixtures import write_noise_images


def test_attribute_image_and_folder_give_the_same_bits(tiny_card, tmp_path, monkeypatch, capsys):
    """With IBA_STATS_SAMPLES set and precision "auto". On a faked AMX CPU the first measurement picks bf16 and any
    later one would pick fp32: the two front ends agree only if they share the one decision (they used to key it by
    the number of noisy copies in the run, so a folder's batch measured again). The kind is faked here, so the test
    means the same under any `--cpu-kind`; without a lower precision "auto" is fp32 with nothing to measure
    (tests/test_precision.py)."""
    kind = "amx"
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("IBA_STATS_SAMPLES", "12")  # `attribute IMG` used to ignore it
    monkeypatch.setattr(precision, "cpu_flags", lambda: set(CPU_KINDS[kind]))
    monkeypatch.setattr(precision, "cuda_bf16", lambda: False)
    measured: list[str] = []

    def fastest(options, timer=None, repeats=3):  # bf16 the first time, fp32 after: a second measurement shows
        measured.append("bf16" if not measured else "fp32")
        return measured[-1], {}

    monkeypatch.setattr(precision, "fastest", fastest)
    folder = tmp_path / "photos"
    first, _ = write_noise_images(folder, 2)  # a batch of two in the folder run: more copies than one image's
    common = ["--model", str(tiny_card), "--trust-code", "--steps", "2", "--batch", "2", "--precision", "auto"]

    assert main(["attribute", str(first), *common]) == 0
    image = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["attribute", str(folder), "--out", str(tmp_path / "run"), "--no-progress", *common]) == 0
    capsys.readouterr()

    from iba_core.runs import open_run

    table = open_run(tmp_path / "run").table
    row = table[table["image"] == first.name].iloc[0]
    expected = "bf16"
    assert image["precision"] == row["precision"] == expected  # the precision beside the bits, in both outputs
    assert set(table["precision"]) == {expected}
    assert measured == ["bf16"]  # measured once, by the first run
    assert image["stats_samples"] == 12
    assert int(row["target"]) == image["target"]  # the top-1 class of each
    assert float(row["total_bits"]) == pytest.approx(image["total_bits"], rel=1e-4, abs=2e-3)
