"""The CLI checks inputs and outputs before any slow work, and writes its results whole or not at all."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from bad_input_helpers import assert_one_sentence, cli_error, run_cli
from iba_core.cli import files
from iba_core.images import load_sample


@pytest.fixture(scope="module")
def photo(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("photo") / "chelsea.jpg"
    load_sample("chelsea").save(path, quality=95)
    return path


@pytest.fixture
def no_network(monkeypatch):
    """Fail the test if any command gets as far as loading a network."""
    from iba_core import networks
    from iba_core.cli import common

    def fail(*args, **kwargs):
        pytest.fail("the network was loaded before the inputs were checked")

    monkeypatch.setattr(common, "load_from_args", fail)
    monkeypatch.setattr(networks, "load_network", fail)


@pytest.fixture
def place(tmp_path: Path, photo: Path) -> dict[str, Path]:
    """Named paths for the argument lists below: an empty image, a plain file, folders with and without images."""
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    plain = tmp_path / "notes.txt"
    plain.write_text("not a folder")
    no_images = tmp_path / "no_images"
    no_images.mkdir()
    (no_images / "readme.txt").write_text("nothing to see")
    return {"empty": empty, "plain": plain, "no_images": no_images, "photo": photo, "missing": tmp_path / "missing",
            "tmp": tmp_path}


def fill(argv: list[str], place: dict[str, Path]) -> list[str]:
    return [a.format(**{k: str(v) for k, v in place.items()}) for a in argv]


#: Every command with a bad input or output, and words its one sentence must hold.
REFUSED = [
    (["attribute", "{empty}"], "is empty"),
    (["attribute", "{missing}/x.jpg"], "not found"),
    (["attribute", "{photo}", "--weights", "{missing}/w.pth"], "--weights file"),
    (["attribute", "{photo}", "--stats-images", "{no_images}"], "No images"),
    (["attribute", "{photo}", "--out", "{plain}/h.npy"], "is a file"),
    (["attribute", "{photo}", "--out", "{tmp}"], "existing folder"),
    (["attribute", "{photo}", "--png", "{tmp}/overlay.heatmap"], "image type"),
    (["attribute", "{photo}", "--method", "readout", "--readout", "{missing}/r.pt"], "--readout file"),
    (["compare", "{empty}", "--out", "{tmp}/c"], "is empty"),
    (["compare", "{photo}", "--out", "{plain}"], "existing file"),
    (["evaluate", "degradation", "--images", "{missing}", "--out", "{tmp}/r.jsonl"], "Image folder not found"),
    (["evaluate", "degradation", "--images", "{no_images}", "--out", "{tmp}/r.jsonl"], "No images"),
    (["evaluate", "degradation", "--images", "{tmp}", "--labels", "{missing}/l.txt", "--out", "{tmp}/r.jsonl"],
     "--labels file"),
    (["evaluate", "bbox", "--images", "{tmp}", "--boxes", "{plain}", "--out", "{tmp}/r.jsonl"], "--boxes path"),
    (["evaluate", "degradation", "--images", "{tmp}", "--out", "{plain}/r.jsonl"], "is a file"),
    (["stats", "--images", "{plain}"], "folder is needed"),
    (["train-readout", "--images", "{no_images}"], "No images"),
    (["train-readout", "--sample-photos", "2", "--preview", "{empty}"], "is empty"),
    (["train-readout", "--sample-photos", "2", "--class-map", "{missing}/m.txt"], "--class-map file"),
    (["train-readout", "--sample-photos", "2", "--out", "{plain}"], "existing file"),
    (["models", "--weights", "{missing}/w.pth"], "--weights file"),
]


@pytest.mark.parametrize("argv, words", REFUSED, ids=[" ".join(a[:1] + a[-2:]) for a, _ in REFUSED])
def test_bad_input_or_output_is_refused_before_the_network_loads(argv, words, place, no_network) -> None:
    message = cli_error(run_cli(fill(argv, place)))
    assert words in message, message
    assert_one_sentence(message)


def test_zero_byte_image_builds_no_torch_model(place, monkeypatch) -> None:
    """Measured without patching the loader: no torch module is constructed for a refused image."""
    import torch

    built = []
    init = torch.nn.Module.__init__

    def counting_init(self, *args, **kwargs):
        built.append(type(self).__name__)
        init(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "__init__", counting_init)
    for argv in (["attribute", "{empty}"], ["compare", "{empty}", "--out", "{tmp}/c"]):
        assert "is empty" in cli_error(run_cli(fill(argv, place)))
    assert built == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into read-only folders")
def test_out_in_a_read_only_folder_is_refused(place, no_network) -> None:
    locked = place["tmp"] / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        message = cli_error(run_cli(["attribute", place["photo"], "--out", locked / "h.npy"]))
        assert "cannot be written" in message
        assert_one_sentence(message)
    finally:
        locked.chmod(0o700)


def test_unwritable_location_is_refused_as_the_write_probe_fails(place, no_network, monkeypatch) -> None:
    """Where the file system refuses writes (also for root: a read-only mount), the probe says so up front."""
    def read_only(*args, **kwargs):
        raise PermissionError(13, "Read-only file system")

    monkeypatch.setattr(files.tempfile, "mkstemp", read_only)
    message = cli_error(run_cli(["attribute", place["photo"], "--out", place["tmp"] / "h.npy"]))
    assert "cannot be written (Read-only file system)" in message
    assert_one_sentence(message)


def test_attribute_out_into_missing_nested_folders(place) -> None:
    out, png = place["tmp"] / "a" / "b" / "heat", place["tmp"] / "a" / "c" / "overlay.png"
    result = run_cli(["attribute", place["photo"], "--steps", "1", "--batch", "2", "--precision", "fp32",
                      "--out", out, "--png", png])
    assert result.code == 0, result.err
    heatmap = np.load(out.with_name("heat.npy"))  # np.save's naming is kept: .npy added
    assert heatmap.shape == (224, 224)
    assert json.loads(result.out)["total_bits"] == pytest.approx(float(heatmap.sum()), rel=1e-3)
    assert png.stat().st_size > 0
    assert not list(place["tmp"].rglob("*.tmp")), "no temp file left behind"


def test_compare_out_into_missing_nested_folders(place) -> None:
    out = place["tmp"] / "runs" / "x" / "compare"
    result = run_cli(["compare", place["photo"], "--methods", "gradient,random", "--out", out])
    assert result.code == 0, result.err
    summary = json.loads((out / "summary.json").read_text())
    assert [m["key"] for m in summary["methods"]] == ["gradient", "random"]
    for m in summary["methods"]:
        assert np.load(out / m["file"]).sum() == pytest.approx(m["sum"], rel=1e-4)
    assert (out / "grid.png").stat().st_size > 0
    assert sorted(p.name for p in out.iterdir()) == ["gradient.npy", "grid.png", "random.npy", "summary.json"]


def test_a_failing_write_leaves_the_previous_file_whole(tmp_path, monkeypatch) -> None:
    target = tmp_path / "h.npy"
    files.save_npy(target, np.arange(4.0))

    def half_then_fail(f, array):
        f.write(b"\x93NUMPY half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "save", half_then_fail)
    with pytest.raises(OSError):
        files.save_npy(target, np.zeros(1000))
    monkeypatch.undo()
    np.testing.assert_array_equal(np.load(target), np.arange(4.0))
    assert [p.name for p in tmp_path.iterdir()] == ["h.npy"], "the temp file is removed"
