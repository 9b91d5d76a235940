"""Readout network and bottleneck: read layers from the spec, structure, initial λ, the training loss."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from iba_core.bottleneck import INIT_ALPHA, lambda_from_alpha
from iba_core.errors import UserError
from iba_core.networks import REGISTRY, get_spec, load_network
from iba_core.readout import (
    ALPHA_MAX,
    LOGITS,
    NetworkPasses,
    ReadoutBottleneck,
    ReadoutNetwork,
    network_passes,
)


def test_paper_read_layers_come_from_the_spec_and_start_at_the_bottleneck():
    for key, spec in REGISTRY.items():
        reads = spec.reads()
        assert reads[0] == spec.readout_layer
        assert reads[-1] == LOGITS
        assert all(r in spec.layers for r in reads[:-1])
    assert get_spec("resnet50").reads() == ("conv2_3", "conv3_4", "conv4_6", "conv5_3", "fc")
    assert get_spec("vgg16").reads() == ("conv3_1", "conv4_1", "conv5_1", "conv5_3", "fc")


def test_shapes_and_initial_lambda_is_almost_one(readout, crops):
    c = readout.config
    assert c.layer == "block2_2" and c.reads == get_spec("efficientnet_lite0").reads()
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


def test_passes_are_kept_with_the_network(readout, offline_model):
    c = readout.config
    passes = network_passes(offline_model, c.layer, c.reads)
    assert isinstance(passes, NetworkPasses) and passes is readout.passes
    assert offline_model.memo.readout_passes[(c.layer, tuple(c.reads))] is passes
    assert network_passes(offline_model, c.layer, list(c.reads)) is passes
    other = load_network("efficientnet_lite0", weights="random")
    assert network_passes(other, c.layer, c.reads) is not passes  # per network, not global


def test_resnet50_readout_shapes_with_random_weights():
    network = load_network("resnet50", weights="random")
    rb = ReadoutBottleneck.create(network)
    assert rb.network is network
    assert rb.config.feature_shape == (256, 56, 56)
    assert rb.config.read_channels == (256, 512, 1024, 2048, 1000)
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        alpha = rb.alpha(rb.first_pass(x))
    assert alpha.shape == (1, 256, 56, 56)
    assert torch.sigmoid(alpha).min() > 0.99


def test_create_checks_its_arguments(offline_model):
    with pytest.raises(UserError, match="distinct"):
        ReadoutBottleneck.create(offline_model, reads=("block2_2", "head", "head", LOGITS))
    with pytest.raises(UserError, match="no layer 'block9_9'"):
        ReadoutBottleneck.create(offline_model, reads=("block2_2", "block9_9", LOGITS))
    rb = ReadoutBottleneck.create(offline_model, layer="block3_2", reads=("head", LOGITS))
    assert rb.config.reads == ("block3_2", "head", LOGITS)  # the bottleneck layer is always read


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
    rb._bind(readout.network, readout.passes)
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
    assert all(p.grad is None and not p.requires_grad for p in readout.network.model.parameters())


def test_a_read_layer_that_returns_a_tuple_is_read_by_its_first_tensor():
    """A block answering (hidden states, something else), as timm's EfficientViM's and transformers' blocks do: the
    readout's first pass keeps its first tensor (it failed with "'tuple' object has no attribute 'clone'")."""
    from torch import nn

    from iba_core.networks import LOGITS
    from iba_core.networks.network import Network
    from iba_core.networks.spec import Preprocess, derive_spec
    from iba_core.readout.network import TracedPasses

    class TupleBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1)

        def forward(self, x):
            y = self.conv(x)
            return y, y.mean()

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem, self.block, self.after = nn.Conv2d(3, 4, 3, padding=1), TupleBlock(), nn.Conv2d(4, 4, 1)
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(self.after(self.block(self.stem(x))[0]).mean(dim=(2, 3)))

    model = Net().eval()
    spec = derive_spec(model, "tuple", input_size=16, layer_names=["stem", "block", "after"], resize=16, crop=16)
    net = Network(spec, model, "random", torch.device("cpu"), Preprocess.of(spec), ["a", "b", "c"])
    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    out = TracedPasses(net, "stem", ["block", LOGITS]).first_pass(x)
    expected = model.block(model.stem(x))[0]
    torch.testing.assert_close(out["block"], expected)
    assert out[LOGITS].shape == (2, 3)
