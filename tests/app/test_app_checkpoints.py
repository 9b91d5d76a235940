"""iba_core.app.checkpoints: readout checkpoints the Compare page offers."""
from __future__ import annotations

from pathlib import Path

import pytest

from iba_core.app import checkpoints

CONFIG = {"model": "efficientnet_lite0", "weights_id": "w", "layer": "block3_2", "reads": ["fc"],
          "feature_shape": [40, 28, 28], "read_channels": [1000]}


def save(path: Path, training: dict) -> Path:
    import iba_core.readout as readout

    readout.save_checkpoint(path, {
        "format": readout.CHECKPOINT_FORMAT, "version": readout.CHECKPOINT_VERSION,
        "config": CONFIG, "state_dict": {}, "training": training,
    })
    return path


@pytest.fixture
def no_shipped(monkeypatch) -> None:
    import iba_core.readout as readout

    monkeypatch.setattr(readout, "default_checkpoint", lambda key: None)


def test_readout_checkpoints_listing(tmp_path, no_shipped) -> None:
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    assert checkpoints.readout_checkpoints("efficientnet_lite0", [tmp_path]) == []  # unreadable: not listed
    info = checkpoints.describe_readout(tmp_path / "junk.pt", False)
    assert info.error
    good = save(tmp_path / "run" / "readout_best.pt", {"data": "12 images below /photos", "epoch": 3, "complete": True})
    found = checkpoints.readout_checkpoints("efficientnet_lite0", [tmp_path, tmp_path / "missing"])
    assert [f.path for f in found] == [good]
    assert found[0].label == "Readout (readout_best.pt)" and "12 images below /photos" in found[0].details
    assert found[0].complete and found[0].state == "complete"
    shipped = checkpoints.describe_readout(good, True)
    assert shipped.label == "Readout (shipped, rough)" and "Trained on 12 images below /photos" in shipped.details
    assert shipped.state == "shipped"
    assert checkpoints.readout_checkpoints("resnet50", [tmp_path]) == []


def test_training_state_and_data_from_the_metadata(tmp_path, no_shipped) -> None:
    unfinished = checkpoints.describe_readout(
        save(tmp_path / "a.pt", {"config": {"images": "/data"}, "complete": False}), False)
    assert unfinished.trained_on == "images in /data" and unfinished.state == "training unfinished"
    unknown = checkpoints.describe_readout(save(tmp_path / "b.pt", {}), False)
    assert unknown.trained_on == "the offline sample photos" and unknown.complete is None and unknown.state == ""


def test_the_shipped_checkpoint_comes_first_and_once() -> None:
    from iba_core.readout import default_checkpoint

    shipped = default_checkpoint("efficientnet_lite0")
    if shipped is None:
        pytest.skip("no shipped readout for efficientnet_lite0 here")
    found = checkpoints.readout_checkpoints("efficientnet_lite0", [shipped.parent])
    assert found[0].shipped and found[0].path == shipped and not found[0].error
    assert [f.path.resolve() for f in found].count(shipped.resolve()) == 1


def test_method_settings_choose_the_checkpoint(tmp_path) -> None:
    from iba_core.methods import get_method

    ckpt = checkpoints.ReadoutCheckpoint(tmp_path / "r.pt", False, "efficientnet_lite0", "x", True)
    method = get_method("readout", **ckpt.method_settings())
    assert method.settings["checkpoint"] == str(tmp_path / "r.pt")


def test_readout_dirs_follow_the_cache_dir(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path))
    assert checkpoints.readout_dirs()[0] == tmp_path / "readout"
