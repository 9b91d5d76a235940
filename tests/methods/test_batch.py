"""Every method takes a batch (`attribute_batch`) and a target object; a batch's maps are the images' maps one
by one (fp32 rounding tolerances: batched kernels sum in another order)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from iba_core.errors import UserError
from iba_core.methods import ClassTarget, LabelSetTarget, as_target, get_method, method_keys

from method_helpers import SMALL, fast_method, stats_settings

#: Three random images: enough to tell a batch from a repeated single image.
BATCH = 3


def _setup(key, random_networks, vgg_patterns, offline_model, chelsea_x):
    """(method, network, images) for `key`: the random ResNet-50 on small images, PatternAttribution on the
    random VGG-16 with its patterns, the Readout on the offline network (the one with a shipped readout)."""
    g = torch.Generator().manual_seed(5)
    if key == "readout":
        x = torch.cat([chelsea_x, chelsea_x.flip(-1), chelsea_x.flip(-2)])
        return get_method(key), offline_model, x
    x = torch.randn(BATCH, 3, SMALL, SMALL, generator=g)
    if key == "pattern_attribution":
        return fast_method(key, patterns=vgg_patterns), random_networks["vgg16"][0], x
    # Grad-CAM's layer is 1 × 1 on ResNet-50 at 32 px (a map of zeros after the ReLU); VGG-16's is 2 × 2
    network, stats = random_networks["vgg16" if "cam" in key else "resnet50"]
    if key == "eigen_cam":  # a principal component needs ≥ 2 positions: VGG-16's pool5 is 1 × 1 at 32 px
        x = torch.randn(BATCH, 3, 2 * SMALL, 2 * SMALL, generator=g)
    return fast_method(key, **stats_settings(key, network, stats)), network, x


@pytest.mark.parametrize("key", method_keys())
def test_a_batch_equals_the_images_one_by_one(key, random_networks, vgg_patterns, offline_model, chelsea_x):
    """attribute_batch(x[B], targets) == [attribute(x[i], targets[i])]. The Per-Sample Bottleneck is seeded per
    image (each image draws the noise it would draw alone), so it is batch-invariant too, up to rounding."""
    method, network, x = _setup(key, random_networks, vgg_patterns, offline_model, chelsea_x)
    targets = [3, 1, 7] if key != "readout" else [285, 281, 3]
    batch = method.attribute_batch(network, x, [ClassTarget(t) for t in targets])
    assert len(batch) == BATCH
    for i, target in enumerate(targets):
        alone = method.attribute(network, x[i:i + 1], target)
        got = batch[i].values
        assert got.shape == alone.values.shape and got.dtype == np.float32
        scale = float(np.abs(alone.values).max()) or 1.0
        np.testing.assert_allclose(got, alone.values, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{key}, image {i}")
        assert batch[i].key == alone.key and batch[i].unit == alone.unit
        if "total_bits" in alone.extra:
            assert batch[i].extra["total_bits"] == pytest.approx(alone.extra["total_bits"], rel=1e-4)
    assert all(np.abs(m.values).max() > 0 for m in batch)  # maps with something in them
    if key not in ("random", "readout"):  # the maps differ between images: the batch was not one image repeated
        assert not np.allclose(batch[0].values, batch[1].values)


def test_targets_are_objects_and_ints_are_classes(random_networks, small_x):
    network, _ = random_networks["resnet50"]
    gradient = get_method("gradient")
    assert as_target(7) == ClassTarget(7) and as_target(np.int64(7)) == ClassTarget(7)
    np.testing.assert_array_equal(gradient.attribute(network, small_x, ClassTarget(7)).values,
                                  gradient.attribute(network, small_x, 7).values)
    with pytest.raises(TypeError):
        as_target(1.5)
    with pytest.raises(UserError, match="out of range"):
        gradient.attribute(network, small_x, LabelSetTarget((2, 1000)))


def test_a_label_set_explains_the_sum_of_its_logits(random_networks, small_x):
    """The gradient is linear: the map of a label set is the sum of its labels' maps; methods that read the
    head themselves say they explain one class."""
    network, stats = random_networks["resnet50"]
    gradient = get_method("gradient")
    both = gradient.attribute(network, small_x, LabelSetTarget((2, 5))).values
    apart = gradient.attribute(network, small_x, 2).values + gradient.attribute(network, small_x, 5).values
    np.testing.assert_allclose(both, apart, rtol=1e-4, atol=1e-5 * float(np.abs(apart).max()))
    maps = gradient.attribute_batch(network, torch.cat([small_x, small_x]), [LabelSetTarget((2, 5)), 2])
    np.testing.assert_allclose(maps[0].values, both, rtol=1e-5, atol=1e-7)
    with pytest.raises(UserError, match="one class at a time"):
        fast_method("iba_10", stats=stats).attribute(network, small_x, LabelSetTarget((2, 5)))


def test_a_batch_needs_one_target_per_image(random_networks, small_x):
    network, _ = random_networks["resnet50"]
    with pytest.raises(ValueError, match="2 images but 1 targets"):
        get_method("gradient").attribute_batch(network, torch.cat([small_x, small_x]), [1])
