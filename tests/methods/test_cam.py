"""Grad-CAM and Guided Grad-CAM against independent autograd computations."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from method_helpers import TinyConvNet, wrap
from iba_core.errors import UserError
from iba_core.methods import get_method
from iba_core.methods.gradients import guided_copy


def hand_grad_cam(activations: torch.Tensor, logit: torch.Tensor, size) -> np.ndarray:
    """weights = spatial mean of ∂logit/∂A, ReLU(Σ_k w_k A_k), bilinear upsampling."""
    (grad,) = torch.autograd.grad(logit, activations)
    weights = grad.mean(dim=(2, 3), keepdim=True)
    cam = F.relu((weights * activations).sum(dim=1, keepdim=True))
    return F.interpolate(cam, size=size, mode="bilinear", align_corners=False)[0, 0].detach().numpy()


def test_grad_cam_equals_hand_computation():
    net = TinyConvNet()
    x = torch.randn(1, 3, 12, 12, generator=torch.Generator().manual_seed(0))
    target = 2
    # independent: run the layers by hand, keep the CAM layer's output as the differentiation variable
    a = net.act2(net.conv2(net.act1(net.conv1(x)))).detach().requires_grad_(True)
    logit = net.fc(net.pool(a).flatten(1))[0, target]
    expected = hand_grad_cam(a, logit, (12, 12))
    got = get_method("grad_cam", layer="act2").attribute(wrap(net), x, target).values
    assert expected.max() > 0
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
    # the same layer as the input of the pooling module
    via_input = get_method("grad_cam", layer="pool", layer_input=True).attribute(wrap(net), x, target).values
    np.testing.assert_allclose(via_input, expected, rtol=1e-4, atol=1e-6)


def test_guided_grad_cam_is_guided_backprop_times_cam():
    net = TinyConvNet()
    x = torch.randn(1, 3, 12, 12, generator=torch.Generator().manual_seed(1))
    cam = get_method("grad_cam", layer="act2").attribute(wrap(net), x, 0).values
    xg = x.clone().requires_grad_(True)
    guided = guided_copy(net)
    (gb,) = torch.autograd.grad(guided(xg)[0, 0], xg)
    expected = (gb[0] * torch.from_numpy(cam)).sum(dim=0).numpy()
    got = get_method("guided_grad_cam", layer="act2").attribute(wrap(net), x, 0).values
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)


def test_offline_model_grad_cam_uses_the_head_stage(offline_model, chelsea_x):
    """EfficientNet-Lite0: the `head` stage's output (via the registry's split) is Grad-CAM's layer."""
    prefix, suffix = offline_model.split("head")
    with torch.no_grad():
        a = prefix(chelsea_x)
    a.requires_grad_(True)
    expected = hand_grad_cam(a, suffix(a)[0, 285], (224, 224))
    got = get_method("grad_cam").attribute(offline_model, chelsea_x, 285).values
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * float(np.abs(expected).max()))


def test_cam_layers_exist_and_have_the_documented_strides(resnet_random, vgg_random, offline_model):
    """Stride 32 everywhere: 7×7 maps at 224 px (VGG-16: pool5, the IBA authors' choice; checked at 64 px)."""
    for network, stride in ((resnet_random, 32), (vgg_random, 32), (offline_model, 32)):
        path, is_input = network.spec.cam_layer
        module = network.model.get_submodule(path)
        seen = []
        hook = (module.register_forward_pre_hook(lambda m, i: seen.append(i[0].shape)) if is_input
                else module.register_forward_hook(lambda m, i, o: seen.append(o.shape)))
        try:
            with torch.no_grad():
                network.model(torch.zeros(1, 3, 64, 64))
        finally:
            hook.remove()
        assert len(seen) == 1 and tuple(seen[0][-2:]) == (64 // stride, 64 // stride), network.key


def test_grad_cam_needs_a_layer_for_unknown_networks():
    with pytest.raises(UserError, match="layer"):
        get_method("grad_cam").attribute(wrap(TinyConvNet()), torch.zeros(1, 3, 8, 8), 0).values
    with pytest.raises(UserError, match="no module"):
        get_method("grad_cam", layer="nope").attribute(wrap(TinyConvNet()), torch.zeros(1, 3, 8, 8), 0).values


@pytest.mark.parametrize("batch", [1, 3])
def test_grad_cam_matches_captum_on_a_feature_map(batch):
    """On a CNN map Grad-CAM is captum's LayerGradCam + bilinear interpolation, per image of a batch."""
    from captum.attr import LayerAttribution, LayerGradCam

    net = TinyConvNet()
    x = torch.randn(batch, 3, 12, 12, generator=torch.Generator().manual_seed(7))
    targets = [2, 0, 3][:batch]
    got = get_method("grad_cam", layer="act2").attribute_batch(wrap(net), x, targets)
    cam = LayerGradCam(net, net.act2).attribute(x, target=targets, relu_attributions=True)
    expected = LayerAttribution.interpolate(cam.detach(), (12, 12), interpolate_mode="bilinear")[:, 0].numpy()
    for i in range(batch):
        assert expected[i].max() > 0
        np.testing.assert_allclose(got[i].values, expected[i], rtol=1e-4, atol=1e-6)
