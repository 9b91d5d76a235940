"""Grad-CAM++, Score-CAM, LayerCAM and Eigen-CAM against pytorch-grad-cam (1.5.7, test-only) and by hand."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from pytorch_grad_cam import EigenCAM, GradCAMPlusPlus, LayerCAM, ScoreCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
from pytorch_grad_cam.utils.svd_on_activations import get_2d_projection_with_sign_correction
from torch import nn

from iba_core.errors import UserError
from iba_core.methods import LabelSetTarget, get_method
from iba_core.methods.cam_variants import most_varying_channels, score_weights, unit_scaled
from iba_core.model_state import frozen_eval
from method_helpers import TinyConvNet, fingerprint, wrap
from reference_impl import hook_count

KEYS = ["grad_cam_pp", "score_cam", "layer_cam", "eigen_cam"]


class SignedEigenCAM(EigenCAM):
    """pytorch-grad-cam's Eigen-CAM with its own sign correction (their plain `get_2d_projection` leaves the SVD's
    sign to LAPACK, so a map can come out negated and rectified to nothing)."""

    def get_cam_image(self, input_tensor, target_layer, target_category, activations, grads, eigen_smooth):
        return get_2d_projection_with_sign_correction(activations)


REFERENCE = {"grad_cam_pp": GradCAMPlusPlus, "score_cam": ScoreCAM, "layer_cam": LayerCAM, "eigen_cam": SignedEigenCAM}


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(np.ravel(a), np.ravel(b))[0, 1])


def reference_maps(key: str, model: nn.Module, layer: nn.Module, x: torch.Tensor, targets: list[int]) -> np.ndarray:
    """pytorch-grad-cam's maps (B, H, W): per image min–max scaled, resized with cv2. The model's flags and
    gradients are restored afterwards (their backward pass would leave .grad on parameters that take one)."""
    with frozen_eval(model), REFERENCE[key](model, [layer]) as cam:
        cam.batch_size = 7  # Score-CAM: several batches of masked images, the last one short
        return cam(x.clone().requires_grad_(True), [ClassifierOutputTarget(t) for t in targets])


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("key", KEYS)
def test_maps_match_pytorch_grad_cam(key, batch):
    """The same tiny CNN, layer, images and classes: Pearson r per image between our upsampled maps and theirs (r
    does not see their min–max scaling; both resize bilinearly with half-pixel centres). The issue asks r ≥ 0.99;
    they agree to ≥ 0.9999, the bar held here: on this network Grad-CAM++ and LayerCAM differ by r ≈ 0.994, so 0.99
    alone would not tell one method from the other."""
    net = TinyConvNet()
    x = torch.randn(batch, 3, 16, 16, generator=torch.Generator().manual_seed(4))
    targets = [2, 0, 3][:batch]
    ours = get_method(key, layer="act2").attribute_batch(wrap(net), x, targets)
    theirs = reference_maps(key, net, net.act2, x, targets)
    for i in range(batch):
        assert np.ptp(theirs[i]) > 0 and np.ptp(ours[i].values) > 0, (key, i)
        assert ours[i].values.min() >= 0
        assert pearson(ours[i].values, theirs[i]) >= 0.9999, (key, i)
    assert hook_count(net) == 0


def test_maps_differ_between_methods_and_classes():
    """Not four names for one map: the variants disagree with each other and (except Eigen-CAM, which has no
    class) with themselves across classes."""
    net = wrap(TinyConvNet())
    x = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(4))
    maps = {key: [get_method(key, layer="act2").attribute(net, x, t).values for t in (0, 2)] for key in KEYS}
    for i, a in enumerate(KEYS):
        for b in KEYS[i + 1:]:
            assert pearson(maps[a][0], maps[b][0]) < 0.9999, (a, b)
    for key in ("grad_cam_pp", "score_cam", "layer_cam"):
        assert not np.allclose(maps[key][0], maps[key][1]), key
    np.testing.assert_array_equal(maps["eigen_cam"][0], maps["eigen_cam"][1])


def test_cams_on_the_offline_network(offline_model, chelsea_x):
    """EfficientNet-Lite0 at its CAM layer (the head stage's output, 7 × 7 × 1280): Grad-CAM++, LayerCAM and Eigen-CAM
    as pytorch-grad-cam computes them on the same split (their hook sits on an Identity after the head stage: the
    head's ReLU6 module also runs in the stem)."""
    prefix, suffix = offline_model.split("head")
    ref = nn.Sequential()
    ref.add_module("prefix", prefix)
    ref.add_module("cam", nn.Identity())
    ref.add_module("suffix", suffix)
    before = fingerprint(offline_model.model)
    for key in ("grad_cam_pp", "layer_cam", "eigen_cam"):
        ours = get_method(key).attribute(offline_model, chelsea_x, 285).values
        theirs = reference_maps(key, ref, ref.cam, chelsea_x, [285])[0]
        assert np.ptp(theirs) > 0
        assert pearson(ours, theirs) >= 0.9999, key  # Grad-CAM++ vs LayerCAM here: r ≈ 0.9993
    assert fingerprint(offline_model.model) == before


def test_cascading_randomisation_applies(offline_model, chelsea_x):
    """The sanity check (Adebayo et al.) on EfficientNet-Lite0: the class-dependent CAMs change once the logits are
    randomised, and more as the cascade goes down; Eigen-CAM, which reads no class, does not change with the
    logits at all and does once the head stage is randomised (measured SSIM: Grad-CAM++ 0.89 / 0.67, LayerCAM
    0.93 / 0.68, Score-CAM on 16 channels 0.96 / 0.79 at logits / block6_1; Eigen-CAM 1.0 / 0.77 at logits / head)."""
    from iba_core.metrics import sanity_check

    for key, settings in (("grad_cam_pp", {}), ("layer_cam", {}), ("score_cam", {"channels": 16}), ("eigen_cam", {})):
        method = get_method(key, **settings)
        assert method.sanity_checkable
        ssim = dict(sanity_check(offline_model, chelsea_x, 285, lambda n, x, t: method.attribute(n, x, t).values,
                                 levels=["logits", "head", "block6_1"]))
        if key == "eigen_cam":
            assert ssim["logits"] == pytest.approx(1.0) and ssim["head"] < 0.9, ssim
        else:
            assert ssim["logits"] < 0.99 and ssim["block6_1"] < 0.85, (key, ssim)


def test_grad_cam_pp_by_hand():
    """Eq. 19 of Chattopadhyay et al. with the exponential's derivatives as powers of the logit's gradient, on the
    tiny CNN's layer (computed here without the library's hooks)."""
    net = TinyConvNet()
    x = torch.randn(1, 3, 12, 12, generator=torch.Generator().manual_seed(6))
    a = net.act2(net.conv2(net.act1(net.conv1(x)))).detach().requires_grad_(True)
    (g,) = torch.autograd.grad(net.fc(net.pool(a).flatten(1))[0, 1], a)
    a = a.detach()
    alpha = g ** 2 / (2 * g ** 2 + a.sum(dim=(2, 3), keepdim=True) * g ** 3 + 1e-6)
    alpha[g == 0] = 0
    weights = (alpha * g.clamp(min=0)).sum(dim=(2, 3), keepdim=True)
    cam = (weights * a).sum(dim=1, keepdim=True).clamp(min=0)
    expected = torch.nn.functional.interpolate(cam, size=(12, 12), mode="bilinear", align_corners=False)[0, 0]
    got = get_method("grad_cam_pp", layer="act2").attribute(wrap(net), x, 1).values
    assert expected.max() > 0
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-6)


def test_score_cam_by_hand_and_its_channel_subset():
    """Each channel upsampled, scaled to [0, 1], multiplies the image; softmax over channels of the target logit
    weights the channels. `channels=k` does the same on the k channels of largest spatial variance."""
    net = TinyConvNet()
    x = torch.randn(1, 3, 12, 12, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        a = net.act2(net.conv2(net.act1(net.conv1(x))))

        def by_hand(channels: list[int]) -> np.ndarray:
            scores, maps = [], []
            for k in channels:
                up = torch.nn.functional.interpolate(a[:, k:k + 1], size=(12, 12), mode="bilinear",
                                                     align_corners=False)[0, 0]
                mask = (up - up.min()) / (up.max() - up.min()) if up.max() > up.min() else torch.zeros_like(up)
                scores.append(net(x * mask)[0, 3])
                maps.append(a[0, k])
            w = torch.softmax(torch.stack(scores), dim=0)
            cam = (w[:, None, None] * torch.stack(maps)).sum(dim=0).clamp(min=0)
            return torch.nn.functional.interpolate(cam[None, None], size=(12, 12), mode="bilinear",
                                                   align_corners=False)[0, 0].numpy()

        variance = a[0].flatten(1).var(dim=1, unbiased=False)
        top2 = sorted(range(5), key=lambda k: -float(variance[k]))[:2]
    network = wrap(net)
    full = get_method("score_cam", layer="act2", batch_size=2).attribute(network, x, 3)
    np.testing.assert_allclose(full.values, by_hand(list(range(5))), rtol=1e-4, atol=1e-6)
    subset = get_method("score_cam", layer="act2", channels=2).attribute(network, x, 3)
    np.testing.assert_allclose(subset.values, by_hand(top2), rtol=1e-4, atol=1e-6)
    assert (subset.key, subset.name) == ("score_cam_top2", "Score-CAM (top 2 channels)")
    assert full.key == "score_cam" and get_method("score_cam").cost == "slow"
    # as many channels as the layer has: the full method
    np.testing.assert_allclose(get_method("score_cam", layer="act2", channels=9).attribute(network, x, 3).values,
                               full.values, rtol=1e-5, atol=1e-7)


def test_channel_helpers():
    maps = torch.tensor([[[1.0, 3.0], [2.0, 5.0]], [[4.0, 4.0], [4.0, 4.0]]])
    scaled = unit_scaled(maps)
    torch.testing.assert_close(scaled[0], torch.tensor([[0.0, 0.5], [0.25, 1.0]]))
    assert torch.equal(scaled[1], torch.zeros(2, 2))  # a constant channel masks everything
    a = torch.zeros(2, 3, 2, 2)
    a[0, 2] = torch.tensor([[0.0, 9.0], [0.0, 0.0]])
    a[1, 0] = torch.tensor([[1.0, 0.0], [0.0, 0.0]])
    picked = most_varying_channels(a, 1)
    assert torch.equal(picked[:, 0], torch.stack([a[0, 2], a[1, 0]]))
    assert torch.equal(most_varying_channels(a, None), a)


def test_channels_constant_at_the_layer_mask_everything():
    """1 × 1 activations: every mask is empty (not the rounding noise of their upsampled copies scaled to [0, 1]),
    so every masked image is the same and the weights are uniform."""
    net = wrap(TinyConvNet())
    x = torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(10))
    a = torch.rand(2, 5, 1, 1, generator=torch.Generator().manual_seed(11)) + 0.1
    weights = score_weights(net, x, a, [1, 2], batch_size=3)
    torch.testing.assert_close(weights, torch.full((2, 5), 0.2), rtol=1e-6, atol=1e-7)


def test_eigen_cam_is_the_first_principal_component():
    """The projection on the first right singular vector of the centred (h·w) × C activations, oriented so that
    its larger magnitude is positive, rectified."""
    net = TinyConvNet()
    x = torch.randn(1, 3, 12, 12, generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        a = net.act2(net.conv2(net.act1(net.conv1(x))))[0].double()
    rows = a.flatten(1).T
    rows = rows - rows.mean(dim=0)
    u, s, _ = torch.linalg.svd(rows, full_matrices=False)
    projection = u[:, 0] * s[0]
    if projection.min().abs() > projection.max().abs():
        projection = -projection
    cam = projection.view(1, 1, *a.shape[1:]).float().clamp(min=0)
    expected = torch.nn.functional.interpolate(cam, size=(12, 12), mode="bilinear", align_corners=False)[0, 0]
    got = get_method("eigen_cam", layer="act2").attribute(wrap(net), x, 0).values
    np.testing.assert_allclose(got, expected.numpy(), rtol=1e-4, atol=1e-6)


class BinaryNet(nn.Module):
    """The tiny CNN with one output z (a binary head) or, `two=True`, the class log-odds [−z, z] as two logits."""

    def __init__(self, two: bool = False):
        super().__init__()
        self.body = TinyConvNet(classes=1)
        self.two = two

    def forward(self, x):
        z = self.body(x)
        return torch.cat([-z, z], dim=1) if self.two else z


@pytest.mark.parametrize("key", KEYS)
def test_a_binary_head_explains_each_class_by_its_log_odds(key):
    """As Grad-CAM: a one-output head answers with [−z, z] during the call, so class 0 has a map too, the same as
    on a network that outputs those two logits itself."""
    one = BinaryNet().eval()
    two = BinaryNet(two=True).eval()
    two.load_state_dict(one.state_dict())
    binary = SimpleNamespace(model=one, spec=SimpleNamespace(head="binary"), categories=["no", "yes"],
                             device=torch.device("cpu"))
    x = torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(9))
    method = get_method(key, layer="body.act2")
    for target in (0, 1):
        got = method.attribute_batch(binary, x, [target, target])
        expected = method.attribute_batch(wrap(two), x, [target, target])
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g.values, e.values, rtol=1e-4, atol=1e-6)
    assert hook_count(one) == 0 and one(x).shape == (2, 1)


class SummedLabels(nn.Module):
    """The tiny CNN's logits 1 and 2 summed into one output: what a label set {1, 2} explains."""

    def __init__(self, body: nn.Module):
        super().__init__()
        self.body = body

    def forward(self, x):
        return self.body(x)[:, 1:3].sum(dim=1, keepdim=True)


@pytest.mark.parametrize("key", KEYS)
def test_a_label_set_explains_the_sum_of_its_logits(key):
    net = TinyConvNet()
    x = torch.randn(1, 3, 12, 12, generator=torch.Generator().manual_seed(12))
    got = get_method(key, layer="act2").attribute(wrap(net), x, LabelSetTarget((1, 2))).values
    expected = get_method(key, layer="body.act2").attribute(wrap(SummedLabels(net)), x, 0).values
    assert np.ptp(expected) > 0
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


class AddsAfterTheLayer(nn.Module):
    """conv (the CAM layer) → + 1 (in place, as a ResNet block's `out += identity`, or not) → ReLU → pool → linear."""

    def __init__(self, in_place: bool):
        super().__init__()
        torch.manual_seed(13)
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.fc = nn.Linear(4, 3)
        self.in_place = in_place

    def forward(self, x):
        a = self.conv(x)
        if self.in_place:
            a += 1.0
        else:
            a = a + 1.0
        return self.fc(torch.relu(a).mean(dim=(2, 3)))


@pytest.mark.parametrize("key", KEYS)
def test_an_in_place_operation_after_the_layer_does_not_change_its_activations(key):
    x = torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(14))
    method = get_method(key, layer="conv")
    got = method.attribute_batch(wrap(AddsAfterTheLayer(in_place=True)), x, [0, 2])
    expected = method.attribute_batch(wrap(AddsAfterTheLayer(in_place=False)), x, [0, 2])
    for g, e in zip(got, expected):
        assert np.ptp(e.values) > 0
        np.testing.assert_allclose(g.values, e.values, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("key", KEYS)
def test_no_hooks_stay_after_an_error_inside_the_network(key):
    """A network that fails after the CAM layer: the error reaches the caller, the capturing hook is gone."""

    class Failing(TinyConvNet):
        def forward(self, x):
            super().forward(x)
            raise RuntimeError("broken head")

    net = Failing()
    with pytest.raises(RuntimeError, match="broken head"):
        get_method(key, layer="act2").attribute(wrap(net), torch.zeros(1, 3, 8, 8), 0)
    assert hook_count(net) == 0


@pytest.mark.parametrize("key", KEYS)
def test_layers_that_are_not_feature_maps_or_run_twice_are_refused(key):
    net = wrap(TinyConvNet())
    with pytest.raises(UserError, match=r"needs a layer whose output lies on the image.*; 'fc' gives \(1, 4\)"):
        get_method(key, layer="fc").attribute(net, torch.zeros(1, 3, 8, 8), 0)

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 3, padding=1)
            self.fc = nn.Linear(3, 2)

        def forward(self, x):
            return self.fc(self.conv(self.conv(x)).mean(dim=(2, 3)))

    twice = Twice()
    with pytest.raises(UserError, match="runs once per forward pass; 'conv' ran 2 times"):
        get_method(key, layer="conv").attribute(wrap(twice), torch.zeros(1, 3, 8, 8), 0)
    assert hook_count(twice) == 0
    with pytest.raises(UserError, match="Grad-CAM layer"):
        get_method(key).attribute(net, torch.zeros(1, 3, 8, 8), 0)


def test_score_cam_settings_are_checked():
    with pytest.raises(UserError, match="batch size"):
        get_method("score_cam", batch_size=0)
    with pytest.raises(UserError, match="number of channels"):
        get_method("score_cam", channels=0)
    with pytest.raises(UserError, match="no setting"):
        get_method("grad_cam_pp", channels=3)
