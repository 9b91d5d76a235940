"""Readout Bottleneck: structure, initial λ, the training loss, checkpoints and their validation."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from iba_core.baselines.base import run_method
from iba_core.bottleneck import INIT_ALPHA, lambda_from_alpha
from iba_core.models import get_spec
from iba_core.readout import (
    ALPHA_MAX,
    LOGITS,
    READOUT_READS,
    ReadoutBottleneck,
    ReadoutCheckpointError,
    ReadoutMethod,
    ReadoutNetwork,
    default_checkpoint,
    export_for_inference,
    load_checkpoint,
    load_readout,
    make_checkpoint,
    readout_attribute,
    save_checkpoint,
    state_digest,
)
from iba_core.stats import sample_photo_batches


@pytest.fixture(scope="module")
def readout(offline_model):
    """An untrained readout for the offline model with statistics from a few sample-photo crops."""
    from iba_core.readout_training import TrainConfig, compute_statistics

    torch.manual_seed(0)
    rb = ReadoutBottleneck.create(offline_model)
    compute_statistics(rb, offline_model, TrainConfig(sample_photos=8, stats_n=16), lambda msg: None)
    return rb


@pytest.fixture(scope="module")
def crops(offline_model):
    return next(sample_photo_batches(offline_model.preprocess, 2, batch_size=2, seed=3))


def test_paper_read_layers_exist_and_start_at_the_bottleneck():
    for key, reads in READOUT_READS.items():
        spec = get_spec(key)
        assert reads[0] == spec.readout_layer
        assert reads[-1] == LOGITS
        assert all(r in spec.layers for r in reads[:-1])
    assert READOUT_READS["resnet50"] == ("conv2_3", "conv3_4", "conv4_6", "conv5_3", "fc")
    assert READOUT_READS["vgg16"] == ("conv3_1", "conv4_1", "conv5_1", "conv5_3", "fc")


def test_shapes_and_initial_lambda_is_almost_one(readout, crops):
    c = readout.config
    assert c.layer == "block2_2" and c.reads == READOUT_READS["efficientnet_lite0"]
    assert c.feature_shape == (24, 56, 56) and c.read_channels == (24, 40, 112, 1280, 1000)
    with torch.no_grad():
        out = readout.first_pass(crops)
        alpha = readout.alpha(out)
    assert alpha.shape == (2, 24, 56, 56)
    assert torch.allclose(alpha, torch.full_like(alpha, INIT_ALPHA), atol=1e-5)
    lam, one_minus = lambda_from_alpha(alpha, c.sigma)
    assert lam.min() > 0.99 and torch.allclose(lam + one_minus, torch.ones_like(lam), atol=1e-6)
    maps = readout.heatmaps(crops)
    assert maps.shape == (2, 224, 224) and torch.isfinite(maps).all() and (maps >= 0).all()
    single = readout.heatmap(crops[:1])
    assert single.shape == (224, 224)
    np.testing.assert_allclose(single, maps[0].numpy(), rtol=1e-4, atol=1e-6)


def test_resnet50_readout_shapes_with_random_weights():
    from iba_core.models import load_model

    loaded = load_model("resnet50", weights="random")
    rb = ReadoutBottleneck.create(loaded)
    assert rb.config.feature_shape == (256, 56, 56)
    assert rb.config.read_channels == (256, 512, 1024, 2048, 1000)
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        alpha = rb.alpha(rb.first_pass(x))
    assert alpha.shape == (1, 256, 56, 56)
    assert torch.sigmoid(alpha).min() > 0.99


def test_resizing_after_the_first_conv_equals_the_paper_order():
    """conv1(concat(resize(normalise(f_i)))) == Σ resize(conv1_i(normalise(f_i))) + b: the speed-up is exact."""
    torch.manual_seed(0)
    chans, size = (3, 5, 7, 6), (8, 8)
    net = ReadoutNetwork(chans, out_channels=4, hidden=(6, 5))
    torch.nn.init.normal_(net.conv3.weight)  # not zero, so the whole network is exercised
    feats = [torch.randn(2, 3, 8, 8), torch.randn(2, 5, 4, 4), torch.randn(2, 7, 3, 5), torch.randn(2, 6)]
    for i, c in enumerate(chans):
        net.set_normalisation(i, torch.randn(c), torch.rand(c) + 0.5)
    with torch.no_grad():
        got = net(feats, size)
        cols = []
        for i, f in enumerate(feats):
            mean, std = net.normalisation(i)
            f = f[:, :, None, None] if f.dim() == 2 else f
            f = (f - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1)
            cols.append(F.interpolate(f, size=size, mode="bilinear", align_corners=False) if f.shape[-1] > 1
                        else f.expand(-1, -1, *size))
        w1 = torch.cat([conv.weight for conv in net.sources], dim=1)
        h = F.relu(F.conv2d(torch.cat(cols, dim=1), w1, net.bias1))
        a = net.conv3(F.relu(net.conv2(h)))
        want = ALPHA_MAX * torch.tanh(a / ALPHA_MAX)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_alpha_stays_bounded_for_extreme_weights():
    net = ReadoutNetwork((3,), out_channels=2, hidden=(4, 4))
    with torch.no_grad():
        for p in net.parameters():
            p.fill_(1e4)
    alpha = net([torch.randn(1, 3, 4, 4) * 1e3], (4, 4))
    assert alpha.abs().max() <= ALPHA_MAX
    lam, one_minus = lambda_from_alpha(alpha, 1.0)
    assert (one_minus > 0).all() and torch.isfinite(torch.log(one_minus)).all()


def test_one_training_step_lowers_the_loss_on_a_fixed_batch(readout, crops):
    rb = ReadoutBottleneck(readout.config)
    rb.load_state_dict(readout.state_dict())
    rb._bind(readout._loaded, readout.passes)
    opt = torch.optim.Adam(rb.parameters(), lr=1e-3)
    labels = torch.tensor([-1, 285])  # -1: the network's own top-1

    def loss():
        return rb(crops, labels, torch.Generator().manual_seed(7))

    before = loss()
    assert before.labels[1] == 285 and before.info > 0
    assert before.loss.item() == pytest.approx(before.ce.item() + 10.0 / (24 * 56 * 56) * before.info.item(), rel=1e-5)
    opt.zero_grad()
    before.loss.backward()
    opt.step()
    with torch.no_grad():
        after = loss()
    assert after.loss.item() < before.loss.item()
    # the analysed network is untouched: no gradients on it
    assert all(p.grad is None and not p.requires_grad for p in readout._loaded.model.parameters())


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


def test_mismatched_checkpoints_give_clear_errors(readout, offline_model, tmp_path):
    from iba_core.models import load_model

    path = save_checkpoint(tmp_path / "r.pt", make_checkpoint(readout))
    with pytest.raises(ReadoutCheckpointError, match="trained for the network 'efficientnet_lite0'.*'resnet50'"):
        load_readout(path, load_model("resnet50", weights="random"))
    with pytest.raises(ReadoutCheckpointError, match="weights 'efficientnet-lite0.*'random'"):
        load_readout(path, load_model("efficientnet_lite0", weights="random"))
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
    method = ReadoutMethod(path)
    amap = run_method(method, offline_model, chelsea_x, res.target)
    assert amap.unit == "bits/pixel" and not amap.signed
    np.testing.assert_allclose(amap.values, res.heatmap, rtol=1e-4, atol=1e-6)


def test_shipped_checkpoint_loads_and_is_trained(offline_model, chelsea_x):
    path = default_checkpoint("efficientnet_lite0")
    assert path is not None, "assets/readout_efficientnet_lite0.pt is missing"
    assert path.stat().st_size <= 5 * 2**20
    rb = load_readout(path, offline_model)
    assert rb.training_info.get("history"), "the shipped checkpoint records its training"
    res = rb.explain(chelsea_x, batch=0)
    assert np.isfinite(res.heatmap).all() and res.heatmap.min() >= 0
    assert math.isnan(res.p_with)
    # trained: λ has moved away from the transparent start (0.993 everywhere) and varies over the image
    assert res.lambda_mean.mean() < 0.95 and res.lambda_mean.std() > 0.01
