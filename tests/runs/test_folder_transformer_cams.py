"""Folder runs on transformer models (issue #39, item 3): `attribute FOLDER --model TIMM_FOLDER --methods <CAMs>`
writes a finite, non-constant map per image and CAM for a tiny timm ViT and Swin saved as timm saves them (no
reshape from the user), and a method the model cannot run is refused with `available_for`'s own sentence."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from iba_core import open_run
from iba_core.cli import main
from iba_core.methods import get_method
from run_fixtures import write_noise_images

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from source_fixtures import TINY_TIMM, save_tiny_timm  # noqa: E402

CAMS = ["grad_cam", "grad_cam_pp", "layer_cam", "eigen_cam", "score_cam"]
IMAGES = 3


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """kind → a tiny timm transformer's saved folder, and "images" → a folder of IMAGES noise PNGs."""
    root = tmp_path_factory.mktemp("transformer-folders")
    out = {kind: save_tiny_timm(root / kind, kind) for kind in ("vit", "swin")}
    write_noise_images(root / "images", IMAGES, size=40)
    return {**out, "images": root / "images"}


def json_line(capsys) -> dict:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["vit", "swin"])
def test_a_folder_run_gives_every_cam_on_a_transformer(folders, kind, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["attribute", str(folders["images"]), "--model", str(folders[kind]), "--methods", *CAMS,
                 "--out", str(out), "--no-progress"]) == 0
    line = json_line(capsys)
    assert line["methods"] == CAMS and line["rows"] == IMAGES * len(CAMS) and line["errors"] == 0
    run = open_run(out)
    assert sorted(run.table["method"].unique()) == sorted(CAMS)
    side = TINY_TIMM[kind][1]["img_size"]
    for i, row in run.table.iterrows():
        values = run.heatmap(i)
        assert values.shape == (side, side) and np.isfinite(values).all(), row["method"]
        assert values.std() > 0, (row["method"], row["image"])  # a map, not a blank


def test_a_folder_run_refuses_a_method_the_transformer_cannot_run_in_its_own_words(folders, tmp_path, capsys):
    from iba_core.networks import load_network

    reason = get_method("guided_grad_cam").available_for(load_network(str(folders["vit"])))
    assert reason and "ReLU" in reason
    out = tmp_path / "run"
    assert main(["attribute", str(folders["images"]), "--model", str(folders["vit"]), "--methods", "grad_cam",
                 "guided_grad_cam", "--out", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert f"Guided Grad-CAM cannot run here: {reason}" in err
