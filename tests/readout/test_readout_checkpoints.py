"""Readout checkpoints: round trip, export, validation messages, entry points, the shipped one, caching."""
import math
import os

import numpy as np
import pytest
import torch

from iba_core.methods import get_method
from iba_core.networks import load_network
from iba_core.readout import (
    ReadoutCheckpointError,
    cached_readout,
    default_checkpoint,
    export_for_inference,
    load_checkpoint,
    load_readout,
    make_checkpoint,
    readout_attribute,
    save_checkpoint,
    state_digest,
)
from iba_core.settings import ASSETS_DIR


def test_checkpoint_roundtrip_and_export(readout, offline_model, crops, tmp_path):
    path = save_checkpoint(tmp_path / "r.pt", make_checkpoint(readout, {"epoch": 3}))
    back = load_readout(path, offline_model)
    assert state_digest(back) == state_digest(readout)
    assert back.config == readout.config
    np.testing.assert_allclose(back.heatmap(crops[:1]), readout.heatmap(crops[:1]), rtol=1e-5)
    small = export_for_inference(path, tmp_path / "half.pt", half=True)
    assert small.stat().st_size < path.stat().st_size
    half = load_readout(small, offline_model)
    np.testing.assert_allclose(half.heatmap(crops[:1]), readout.heatmap(crops[:1]), rtol=0.05, atol=1e-3)


def test_export_drops_the_resume_state(readout, tmp_path):
    path = save_checkpoint(tmp_path / "r.pt", make_checkpoint(readout, {"epoch": 1, "optimizer": {}, "rng": {}}))
    exported = load_checkpoint(export_for_inference(path, tmp_path / "x.pt"))
    assert exported["training"] == {"epoch": 1}


def test_mismatched_checkpoints_give_clear_errors(readout, offline_model, tmp_path):
    path = save_checkpoint(tmp_path / "r.pt", make_checkpoint(readout))
    with pytest.raises(ReadoutCheckpointError, match="trained for the network EfficientNet-Lite0.*is ResNet-50") as err:
        load_readout(path, load_network("resnet50", weights="random"))
    assert "train-readout --model resnet50" in err.value.cli_hint and "Compare page" in err.value.app_hint
    with pytest.raises(ReadoutCheckpointError, match="weights 'efficientnet-lite0.*'random'"):
        load_readout(path, load_network("efficientnet_lite0", weights="random"))
    with pytest.raises(ReadoutCheckpointError, match="not found"):
        load_readout(tmp_path / "missing.pt", offline_model)
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(ReadoutCheckpointError, match="not a readable"):
        load_readout(tmp_path / "junk.pt", offline_model)
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.pt")
    with pytest.raises(ReadoutCheckpointError, match="not an IBA Explorer readout"):
        load_checkpoint(tmp_path / "other.pt")
    ck = make_checkpoint(readout)
    ck["config"]["layer"] = "block9_9"
    with pytest.raises(ReadoutCheckpointError, match="block9_9"):
        load_readout(save_checkpoint(tmp_path / "layer.pt", ck), offline_model)
    ck = make_checkpoint(readout)
    ck["state_dict"]["readout.conv3.weight"] = torch.zeros(3, 3, 1, 1)
    with pytest.raises(ReadoutCheckpointError, match="conv3.weight"):
        load_readout(save_checkpoint(tmp_path / "shape.pt", ck), offline_model)
    with pytest.raises(ReadoutCheckpointError, match="feature maps shaped"):
        readout.heatmap(torch.zeros(1, 3, 160, 160))


def test_attribute_entry_points(readout, offline_model, chelsea_x, tmp_path):
    path = save_checkpoint(tmp_path / "r.pt", make_checkpoint(readout))
    res = readout_attribute(offline_model, path, chelsea_x, target=None, batch=2)
    assert res.heatmap.shape == (224, 224) and res.feature_bits.shape == (56, 56)
    assert res.heatmap.sum() == pytest.approx(res.total_bits, rel=1e-3)
    assert res.target == int(offline_model.model(chelsea_x).argmax()) and res.history == []
    assert 0 <= res.p_without <= 1 and 0 <= res.p_with <= 1
    assert res.summary()["method"] == "readout" and res.summary()["checkpoint"] == str(path)
    amap = get_method("readout", checkpoint=path).attribute(offline_model, chelsea_x, res.target)
    assert amap.unit == "bits/pixel" and not amap.signed
    np.testing.assert_allclose(amap.values, res.heatmap, rtol=1e-4, atol=1e-6)


def test_cached_readouts_live_with_the_network_and_follow_the_file(readout, tmp_path):
    network = load_network("efficientnet_lite0")  # its own memo: nothing shared with other tests
    path = save_checkpoint(tmp_path / "r.pt", make_checkpoint(readout))
    first = cached_readout(network, path)
    assert cached_readout(network, path) is first
    assert list(network.memo.readouts) == [str(path.resolve())]
    assert network.memo.readouts[str(path.resolve())] == (path.stat().st_mtime_ns, first)
    # a rewritten file is loaded again and replaces its older version
    stat = path.stat()
    save_checkpoint(path, make_checkpoint(readout, {"epoch": 2}))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    second = cached_readout(network, path)
    assert second is not first and second.training_info == {"epoch": 2}
    assert len(network.memo.readouts) == 1
    # a bounded number of files are kept: the ones used last
    for i in range(6):
        cached_readout(network, save_checkpoint(tmp_path / f"r{i}.pt", make_checkpoint(readout)))
    assert list(network.memo.readouts) == [str((tmp_path / f"r{i}.pt").resolve()) for i in range(2, 6)]
    with pytest.raises(ReadoutCheckpointError, match="not found"):
        cached_readout(network, tmp_path / "missing.pt")


def test_shipped_checkpoint_loads_and_is_trained(offline_model, chelsea_x):
    path = default_checkpoint("efficientnet_lite0")
    assert path is not None, "assets/readout_efficientnet_lite0.pt is missing"
    assert path.parent == ASSETS_DIR and default_checkpoint("no_such_network") is None
    assert path.stat().st_size <= 5 * 2**20
    rb = load_readout(path, offline_model)
    assert rb.training_info.get("history"), "the shipped checkpoint records its training"
    res = rb.explain(chelsea_x, batch=0)
    assert np.isfinite(res.heatmap).all() and res.heatmap.min() >= 0
    assert math.isnan(res.p_with)
    # trained: λ has moved away from the transparent start (0.993 everywhere) and varies over the image
    assert res.lambda_mean.mean() < 0.95 and res.lambda_mean.std() > 0.01
