"""`attribute IMG` and `attribute FOLDER` decide statistics and precision by one policy each, so one photo gets the
same bits either way, and both outputs say the precision (issue #26.2)."""
from __future__ import annotations

import json

import pytest

from iba_core import precision
from iba_core.cli import main
from iba_core.images import load_sample

from hardware import CPU_KINDS


@pytest.mark.parametrize("kind", ["avx2", "amx"])
def test_attribute_image_and_folder_give_the_same_bits(kind, tmp_path, monkeypatch, capsys):
    """With IBA_STATS_SAMPLES set and precision "auto". On a faked AMX CPU the first measurement picks bf16 and any
    later one would pick fp32: the two front ends agree only if they share the one decision (they used to key it by
    the number of noisy copies in the run, so a folder's batch measured again)."""
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
    folder.mkdir()
    load_sample("chelsea").save(folder / "chelsea.jpg", quality=95)
    load_sample("coffee").save(folder / "coffee.jpg", quality=95)  # a batch of two: more copies than one image's
    common = ["--steps", "1", "--batch", "2", "--precision", "auto"]

    assert main(["attribute", str(folder / "chelsea.jpg"), *common]) == 0
    image = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(["attribute", str(folder), "--out", str(tmp_path / "run"), "--no-progress", *common]) == 0
    capsys.readouterr()

    from iba_core.runs import open_run

    table = open_run(tmp_path / "run").table
    row = table[table["image"] == "chelsea.jpg"].iloc[0]
    expected = "bf16" if kind == "amx" else "fp32"
    assert image["precision"] == row["precision"] == expected  # the precision beside the bits, in both outputs
    assert set(table["precision"]) == {expected}
    assert measured == (["bf16"] if kind == "amx" else [])  # measured once, by the first run
    assert image["stats_samples"] == 12
    assert int(row["target"]) == image["target"] == 285
    assert float(row["total_bits"]) == pytest.approx(image["total_bits"], rel=1e-4, abs=2e-3)
