"""The Dataset page's folder run (`iba_core.app.folder_job`) on a tiny timm ViT saved as timm saves it (issue #39,
item 3): every CAM gives a finite, non-constant map per image with no reshape from the user, and a method the ViT
cannot run is refused before the run with `available_for`'s own sentence."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from run_fixtures import write_noise_images  # noqa: E402
from source_fixtures import save_tiny_timm  # noqa: E402

from iba_core import open_run  # noqa: E402
from iba_core.app import folder_job  # noqa: E402
from iba_core.app.state import SharedModel  # noqa: E402
from iba_core.errors import UserError  # noqa: E402
from iba_core.methods import get_method  # noqa: E402
from iba_core.trust import Trust  # noqa: E402

CAMS = ["grad_cam", "grad_cam_pp", "layer_cam", "eigen_cam", "score_cam"]
IMAGES = 3


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> SharedModel:
    from iba_core.networks import load_network

    return SharedModel(load_network(str(save_tiny_timm(tmp_path_factory.mktemp("vit") / "vit", "vit"))))


@pytest.fixture
def images(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(folder_job, "_JOB", None)  # no run left from another test
    write_noise_images(tmp_path / "images", IMAGES, size=40)
    return tmp_path / "images"


def test_the_folder_job_gives_every_cam_on_a_vit(shared, images, tmp_path):
    job = folder_job.start_folder_job(shared, str(images), str(tmp_path / "run"), CAMS,
                                      trust=Trust(server_paths=(tmp_path.resolve(),)), owner="me")
    assert job.wait(300)
    assert job.error is None and job.label == "finished", job.error
    run = open_run(tmp_path / "run")
    table = run.table
    assert len(table) == IMAGES * len(CAMS) and table["error"].isna().all()
    assert sorted(table["method"].unique()) == sorted(CAMS)
    for i, row in table.iterrows():
        values = run.heatmap(i)
        assert values.shape == (32, 32) and np.isfinite(values).all(), row["method"]
        assert values.std() > 0, (row["method"], row["image"])


@pytest.mark.parametrize("key", ["guided_grad_cam", "guided_backprop"])
def test_a_method_the_vit_cannot_run_is_refused_in_its_own_words(shared, images, tmp_path, key):
    method = get_method(key)
    reason = method.available_for(shared.network)
    assert reason and "ReLU" in reason
    with pytest.raises(UserError) as refused:
        folder_job.start_folder_job(shared, str(images), str(tmp_path / "run"), ["grad_cam", key],
                                    trust=Trust(server_paths=(tmp_path.resolve(),)), owner="me")
    assert refused.value.message == f"{method.name} cannot run on this network: {reason}"
    assert not (tmp_path / "run").exists()  # refused before any work
