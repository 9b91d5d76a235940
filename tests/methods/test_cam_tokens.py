"""The CAM family on transformer token layers, without a `reshape_transform` from the user: equal to pytorch-grad-cam
(1.5.7) given the matching one (class, distillation and register tokens dropped; Swin's channels-last grid moved
channels first), on tiny timm models saved and loaded as users do; and the CAM layer a transformer gets by default."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from pytorch_grad_cam import GradCAM
from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget

from iba_core.methods import get_method
from iba_core.model_state import frozen_eval
from reference_impl import hook_count
from test_cam_variants import REFERENCE, pearson

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))  # source_fixtures: models saved as users do

CAMS = {"grad_cam": GradCAM, **REFERENCE}
#: Tokens off the grid per tiny model of `source_fixtures.TINY_TIMM` (class; class + distillation; class + 4
#: registers); None: a Swin's (N, h, w, C) grid.
EXTRA = {"vit": 1, "deit": 2, "vit_reg": 5, "swin": None}


@pytest.fixture(scope="module")
def tiny_transformers(tmp_path_factory):
    """kind → the tiny timm transformer loaded from its saved folder (`load_network`, as the CLI does)."""
    from iba_core.networks import load_network
    from source_fixtures import save_tiny_timm

    root = tmp_path_factory.mktemp("tiny_transformers")
    return {kind: load_network(str(save_tiny_timm(root / kind, kind))) for kind in EXTRA}


def reshape_for(kind: str, grid: int):
    """The `reshape_transform` a pytorch-grad-cam user writes by hand for this model."""
    extra = EXTRA[kind]
    if extra is None:
        return lambda t: t.permute(0, 3, 1, 2)
    return lambda t: t[:, extra:, :].reshape(t.shape[0], grid, grid, t.shape[2]).permute(0, 3, 1, 2)


def images(batch: int, size: int = 32) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(11))


@pytest.mark.parametrize("kind", list(EXTRA))
@pytest.mark.parametrize("key", list(CAMS))
def test_token_cams_match_pytorch_grad_cam_with_reshape_transform(tiny_transformers, kind, key):
    """Pearson r ≥ 0.9999 per image between our maps at the default CAM layer and pytorch-grad-cam's at the same
    module with the reshape a user would write (r does not see their min–max scaling)."""
    net = tiny_transformers[kind]
    path, is_input = net.spec.cam_layer
    assert not is_input
    module = net.model.get_submodule(path)
    grid = {"vit": 4, "deit": 4, "vit_reg": 4, "swin": 8}[kind]
    x, targets = images(2), [1, 3]
    ours = get_method(key).attribute_batch(net, x, targets)
    with frozen_eval(net.model), CAMS[key](net.model, [module], reshape_transform=reshape_for(kind, grid)) as cam:
        cam.batch_size = 7  # Score-CAM: its masked images in several batches
        theirs = cam(x.clone().requires_grad_(True), [ClassifierOutputTarget(t) for t in targets])
    for i in range(2):
        assert np.ptp(theirs[i]) > 0 and np.ptp(ours[i].values) > 0, (kind, key, i)
        assert pearson(ours[i].values, theirs[i]) >= 0.9999, (kind, key, i)
    assert hook_count(net.model) == 0


def test_the_default_cam_layer_of_a_class_token_vit_is_the_last_blocks_input(tiny_transformers):
    """After a class-token ViT's last block only the class token reaches the head: the patches' gradients there are
    zero and Grad-CAM is blank, which is why the CAM layer is the block before it. A Swin pools every position:
    its last stage is the CAM layer."""
    for kind in ("vit", "deit", "vit_reg"):
        net = tiny_transformers[kind]
        blocks = [name for name in net.spec.layers if name.startswith("blocks.")]
        assert net.spec.cam_layer == (blocks[-2], False), kind
        last = get_method("grad_cam", layer=blocks[-1]).attribute(net, images(1), 2).values
        assert np.abs(last).max() == 0, kind
        default = get_method("grad_cam").attribute(net, images(1), 2).values
        assert np.ptp(default) > 0, kind
    assert tiny_transformers["swin"].spec.cam_layer == ("layers.1", False)


def test_a_token_layer_given_as_a_modules_input(tiny_transformers):
    """layer_input: the last block's input is the previous block's output, laid on the same grid."""
    net = tiny_transformers["deit"]
    by_output = get_method("layer_cam", layer="blocks.1").attribute(net, images(1), 0).values
    by_input = get_method("layer_cam", layer="blocks.2", layer_input=True).attribute(net, images(1), 0).values
    np.testing.assert_allclose(by_input, by_output, rtol=1e-4, atol=1e-6)


def test_hugging_face_vit_gets_every_cam(tmp_path):
    """A transformers ViT folder: each CAM runs at the default CAM layer and gives a map of the image's size."""
    from iba_core.networks import load_network
    from source_fixtures import save_hf_vit

    net = load_network(str(save_hf_vit(tmp_path / "vit")))
    assert net.spec.cam_layer is not None
    x = images(1, net.spec.crop)
    for key in CAMS:
        values = get_method(key).attribute(net, x, 1).values
        assert values.shape == (net.spec.crop, net.spec.crop) and np.isfinite(values).all(), key
        assert np.ptp(values) > 0, key


def test_a_layer_that_folds_positions_into_the_batch_is_refused():
    """A layer whose first axis is not the image batch (MobileViT folds patch positions into it) gets one
    sentence, not a reshape error."""
    from torch import nn

    from iba_core.errors import UserError
    from method_helpers import wrap

    class Folds(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.inner = nn.Identity()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            a = self.conv(x)  # (B, 4, 8, 8) → (B·4, 16, 4): 4 positions of each 2×2 patch folded into the batch
            b, c, h, w = a.shape
            folded = self.inner(a.reshape(b, c, h // 2, 2, w // 2, 2).permute(0, 3, 5, 2, 4, 1).reshape(b * 4, -1, c))
            return self.fc(folded.reshape(b, -1, c).mean(dim=1))

    with pytest.raises(UserError, match="first axis is the image batch"):
        get_method("grad_cam", layer="inner").attribute(wrap(Folds()), torch.zeros(1, 3, 8, 8), 0)


class CarriedToken(torch.nn.Module):
    """PiT's shape of problem: a stage returns (map, class token); the head reads the class token only, so the last
    stage's map — the last map after the blocks — never reaches the output."""

    def __init__(self):
        super().__init__()
        self.stem = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.mix = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.last = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x):
        a = self.mix(self.stem(x))
        token = a.mean(dim=(2, 3))  # carried past the last stage
        self.last(a)  # computed, never used by the head
        return self.head(token)


def test_a_cam_layer_the_output_does_not_depend_on_is_passed_over():
    """The rule's first choice ('last', the last map) is checked against the network and gives way to the next
    layer that reaches the output; a user who names the unused layer gets one sentence, not autograd's error."""
    from iba_core.errors import UserError
    from iba_core.networks.blocks import reaches_output
    from iba_core.networks.network import Network
    from iba_core.networks.spec import Preprocess, derive_spec

    model = CarriedToken().eval()
    assert not reaches_output(model, "last", 16) and reaches_output(model, "mix", 16)
    spec = derive_spec(model, "carried", input_size=16, guess_cam_layer=True, resize=16, crop=16)
    assert spec.cam_layer == ("mix", False)
    net = Network(spec, model, "random", torch.device("cpu"), Preprocess.of(spec), ["a", "b", "c"])
    x = images(1, 16)
    assert np.ptp(get_method("grad_cam").attribute(net, x, 1).values) > 0
    with pytest.raises(UserError, match="does not depend on it"):
        get_method("grad_cam", layer="last").attribute(net, x, 1)
    assert hook_count(model) == 0
