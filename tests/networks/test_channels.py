"""Networks whose input is not RGB (issue #21, point 3): one channel (X-ray, CT, microscopy: a timm model built
with in_chans=1) or more than three (multispectral tiles: in_chans=4, read from .npy and TIFF files), end to end
through the library and the CLI, with random weights saved offline; and the refusals, one sentence each."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from iba_core.errors import UserError
from iba_core.images import ImageError
from iba_core.band_images import MultiBandImage, load_input
from iba_core.networks import ModelCardError, load_network
from iba_core.networks.spec import fit_channels, input_channels_of
from source_fixtures import attribute_cli, save_timm_folder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bad_inputs"))
from bad_input_helpers import assert_one_sentence, cli_error, run_cli  # noqa: E402

FINDINGS = ["normal", "nodule", "effusion"]
COVER = ["water", "forest", "field"]
#: The 4-band card's crop (resize 128): small, and layer1 of a ResNet-18 is still 28 × 28 there.
CROP = 112


def tile(seed: int, size: tuple[int, int] = (60, 72)) -> np.ndarray:
    """A 4-band uint16 tile (height × width × 4), each band with its own brightness."""
    rng = np.random.default_rng(seed)
    scale = np.array([0.2, 0.4, 0.6, 0.8])
    return (rng.random((*size, 4)) * scale * 65535).astype(np.uint16)


def card_text(mean: str = "[0.3, 0.3, 0.3, 0.3]", std: str = "[0.2, 0.2, 0.2, 0.2]", **changes: str) -> str:
    """The 4-band card (a timm ResNet-18 with in_chans = 4), with entries replaced or added."""
    entries = {"arch": '"timm:resnet18"', "weights": '"bands.safetensors"', "classes": '"classes.txt"',
               "stats_images": '"tiles"', "display_bands": "[2, 1, 0]", **changes}
    head = "\n".join(f"{k} = {v}" for k, v in entries.items())
    return (f"{head}\n\n[arch_args]\nin_chans = 4\n\n[preprocess]\nresize = 128\ncrop = {CROP}\nmean = {mean}\n"
            f"std = {std}\n")


@pytest.fixture(scope="module")
def gray_folder(tmp_path_factory) -> Path:
    """timm's ResNet-18 with in_chans=1 and 3 classes, random weights, saved by save_for_hf."""
    return save_timm_folder(tmp_path_factory.mktemp("gray") / "xray", classes=FINDINGS, in_chans=1)


@pytest.fixture(scope="module")
def bands(tmp_path_factory) -> Path:
    """The 4-band card's folder: bands.safetensors (timm ResNet-18, in_chans=4, 3 classes), classes.txt, tiles/ (six
    4-band .npy files for the statistics), bands.toml, and tile.npy / tile.tif (one tile to attribute, both ways)."""
    import timm
    import tifffile
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("bands")
    torch.manual_seed(2)
    save_file(timm.create_model("resnet18", in_chans=4, num_classes=3).state_dict(), root / "bands.safetensors")
    (root / "classes.txt").write_text("\n".join(COVER) + "\n")
    (root / "tiles").mkdir()
    for i in range(6):
        np.save(root / "tiles" / f"tile{i}.npy", tile(10 + i))
    (root / "bands.toml").write_text(card_text())
    np.save(root / "tile.npy", tile(1))
    tifffile.imwrite(root / "tile.tif", tile(1), photometric="minisblack", planarconfig="contig")
    return root


# ---- one channel ---------------------------------------------------------------------------------------------


def test_a_grayscale_timm_folder_attributes_a_photo_by_class_name(gray_folder, image, capsys, tmp_path):
    summary, heatmap = attribute_cli([image, "--model", gray_folder, "--target", "nodule"], capsys, tmp_path)
    assert summary["target"] == 1 and summary["class_name"] == "nodule"
    assert heatmap.shape == (224, 224) and summary["path"] == "fx"  # the cut was checked on 1-channel images
    assert summary["stats_samples"] == 8  # the sample photos, in gray


def test_a_grayscale_network_reads_a_photo_in_gray_and_normalises_its_one_channel(gray_folder, image):
    net = load_network(gray_folder)
    assert net.spec.channels == net.preprocess.channels == 1
    # timm's own rule for ImageNet's numbers on one channel: their average (what save_for_hf wrote)
    np.testing.assert_allclose(net.spec.mean, [0.449], rtol=1e-4)
    np.testing.assert_allclose(net.spec.std, [0.226], rtol=1e-4)
    photo = net.preprocess.load(image)
    assert isinstance(photo, Image.Image) and photo.mode == "L"
    cropped = net.preprocess.crop(photo)
    shown = np.asarray(cropped)
    assert cropped.mode == "RGB" and shown.shape == (224, 224, 3)  # gray in RGB form, for the drawing code
    assert (shown[..., 0] == shown[..., 1]).all() and (shown[..., 1] == shown[..., 2]).all() and shown.std() > 0
    x = net.preprocess.normalise(cropped)
    assert x.shape == (1, 1, 224, 224)
    np.testing.assert_allclose(x[0, 0].numpy(), (shown[..., 0] / 255 - 0.449) / 0.226, rtol=1e-4, atol=1e-4)
    # The same as reading the colour photo: the crop converts it
    np.testing.assert_allclose(net.preprocess(Image.open(image)).numpy(), x.numpy(), rtol=1e-4, atol=1e-5)
    assert [info.shape[1] for info in net.layer_table()][:1] == [64]  # the dry pass took one channel


def test_the_sample_photos_serve_a_grayscale_network_in_gray(gray_folder):
    from iba_core.image_sources import sample_photo_batches

    net = load_network(gray_folder)
    batch = next(sample_photo_batches(net.preprocess, 2, batch_size=2, seed=0))
    assert batch.shape == (2, 1, 224, 224) and torch.isfinite(batch).all()


def test_any_module_of_one_channel_gets_its_channels_and_an_fx_cut():
    from torch import nn

    from iba_core.networks import network_from_module

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))
    net = network_from_module(model, "gray-tiny")
    assert net.spec.channels == 1 and len(net.spec.mean) == 1
    assert net.layer_table()[0].shape == (1, 8, 224, 224)
    # The cut is checked on random 1-channel images (with 3 channels it could not run: the hook path)
    assert net.split_path("2") == "fx" and net.fx_split_reason("2") is None
    prefix, suffix = net.fx_split("2")
    x = torch.randn(2, 1, 224, 224)
    torch.testing.assert_close(suffix(prefix(x)), model(x), rtol=1e-4, atol=1e-5)


def test_channels_and_mean_helpers():
    assert fit_channels([0.5], 4) == (0.5,) * 4
    np.testing.assert_allclose(fit_channels((0.485, 0.456, 0.406), 2), [0.449, 0.449], rtol=1e-4)
    assert fit_channels([0.1, 0.2, 0.3, 0.4], 4) == (0.1, 0.2, 0.3, 0.4)
    with pytest.raises(UserError, match="has 2 numbers for mean or std, but the network takes 4"):
        fit_channels([0.1, 0.2], 4)
    assert input_channels_of(torch.nn.Sequential(torch.nn.Conv2d(13, 8, 3), torch.nn.ReLU())) == 13
    assert input_channels_of(torch.nn.Linear(3, 2), default=None) is None


# ---- four bands ----------------------------------------------------------------------------------------------


def test_a_4_band_card_attributes_a_npy_and_a_tif_tile_alike(bands, capsys, tmp_path):
    card = bands / "bands.toml"
    from_npy, heat_npy = attribute_cli([bands / "tile.npy", "--model", card, "--target", "forest"], capsys, tmp_path)
    from_tif, heat_tif = attribute_cli([bands / "tile.tif", "--model", card, "--target", "forest"], capsys, tmp_path)
    for summary in (from_npy, from_tif):
        assert summary["model"] == "card:bands" and summary["class_name"] == "forest" and summary["target"] == 1
        assert summary["stats_samples"] == 6  # the card's folder of six 4-band tiles
    assert heat_npy.shape == (CROP, CROP)
    np.testing.assert_allclose(heat_tif, heat_npy, rtol=1e-4, atol=1e-6 * float(heat_npy.max()))


def test_a_4_band_tile_is_scaled_cropped_and_normalised_per_band(bands):
    net = load_network(bands / "bands.toml")
    assert net.spec.channels == 4 and net.spec.display_bands == (2, 1, 0)
    image = net.preprocess.load(bands / "tile.npy")
    assert isinstance(image, MultiBandImage) and image.size == (72, 60)
    np.testing.assert_allclose(image.data, tile(1) / 65535, rtol=1e-6)  # uint16 ÷ 65535
    same = net.preprocess.load(bands / "tile.tif")
    np.testing.assert_array_equal(same.data, image.data)
    cropped = net.preprocess.crop(image)
    assert isinstance(cropped, MultiBandImage) and cropped.size == (CROP, CROP)
    x = net.preprocess.normalise(cropped)
    assert x.shape == (1, 4, CROP, CROP)
    for b in range(4):  # each band by its own mean and std
        np.testing.assert_allclose(x[0, b].numpy(), (cropped.data[..., b] - 0.3) / 0.2, rtol=1e-5, atol=1e-5)
    # Resizing keeps bands apart: a tile whose bands are constant stays constant, band by band.
    flat = net.preprocess(MultiBandImage(np.ones((60, 72, 4)) * [0.1, 0.2, 0.3, 0.4]))
    np.testing.assert_allclose(flat[0].mean(dim=(1, 2)).numpy(), (np.array([0.1, 0.2, 0.3, 0.4]) - 0.3) / 0.2,
                               rtol=1e-4, atol=1e-4)
    assert float(flat.std(dim=(2, 3)).max()) < 1e-4
    # Shown: bands 3, 2, 1 (numbered from 1) as red, green, blue, in the drawing code's RGB form.
    shown = np.asarray(cropped)
    assert shown.shape == (CROP, CROP, 3) and shown.dtype == np.uint8
    assert "bands 3, 2, 1 of 4" in cropped.caption()


def test_statistics_of_a_4_band_network_need_a_folder_of_its_images(bands):
    from iba_core.labels import DataError
    from iba_core.feature_stats import get_stats

    net = load_network(bands / "bands.toml")
    with pytest.raises(DataError) as err:
        get_stats(net, net.spec.default_layer, n=4)  # no folder: the sample photos
    assert "offline sample photos are RGB" in err.value.message and "4-band" in err.value.message
    assert_one_sentence(err.value.message)


# ---- refusals, one sentence each -------------------------------------------------------------------------------


def test_a_4_band_file_for_an_rgb_network_is_refused(bands):
    message = cli_error(run_cli(["attribute", bands / "tile.npy", "--model", "torchvision:resnet18",
                                 "--weights", "random", "--steps", "1"]))
    assert "The file holds a 4-band image, but the network takes 3-channel (RGB) images." in message
    assert_one_sentence(message)


def test_a_jpeg_for_the_4_band_network_is_refused(bands, tmp_path):
    jpeg = tmp_path / "photo.jpg"
    Image.new("RGB", (64, 48), (200, 120, 40)).save(jpeg)
    message = cli_error(run_cli(["attribute", jpeg, "--model", bands / "bands.toml", "--steps", "1"]))
    assert "holds a 3-channel (RGB) image, but the network takes 4-band images" in message
    assert ".npy" in message
    assert_one_sentence(message)


def test_nan_in_the_array_is_refused(bands, tmp_path):
    data = (tile(3) / 65535).astype(np.float32)
    data[5, 7, 2] = np.nan
    np.save(tmp_path / "nan.npy", data)
    with pytest.raises(ImageError, match="NaN or infinite values"):
        load_input(tmp_path / "nan.npy", 4)
    message = cli_error(run_cli(["attribute", tmp_path / "nan.npy", "--model", bands / "bands.toml"]))
    assert "NaN or infinite values" in message
    assert_one_sentence(message)


class _Touch:
    """Unpickling it creates a file: the proof that a pickled .npy was (or was not) unpickled."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return Path.touch, (self.path,)


def test_a_pickled_npy_is_never_unpickled(bands, tmp_path):
    marker = tmp_path / "unpickled"
    array = np.empty((2, 2, 4), dtype=object)
    array[...] = _Touch(marker)
    np.save(tmp_path / "objects.npy", array, allow_pickle=True)
    proof = tmp_path / "proof"
    array[...] = _Touch(proof)
    np.save(tmp_path / "proof.npy", array, allow_pickle=True)
    np.load(tmp_path / "proof.npy", allow_pickle=True)  # where pickles are allowed, loading such a file runs code
    assert proof.exists()
    with pytest.raises(ImageError, match="Python objects \\(a pickle\\), which are never loaded"):
        load_input(tmp_path / "objects.npy", 4)
    message = cli_error(run_cli(["attribute", tmp_path / "objects.npy", "--model", bands / "bands.toml"]))
    assert "Python objects (a pickle)" in message
    assert_one_sentence(message)
    assert not marker.exists()


@pytest.mark.parametrize("changes, text", [
    ({"display_bands": "[4, 2, 1]"}, "display_bands must be three band numbers (red, green, blue) from 0 to 3"),
    ({"display_bands": "[1, 2]"}, "display_bands must be three band numbers"),
    ({"mean": "[0.3, 0.3, 0.3]"}, "preprocess.mean must be 4 numbers, one per input channel of the network, not 3"),
    ({"channels": "3", "mean": "[0.3, 0.3, 0.3]", "std": "[0.2, 0.2, 0.2]"},
     "says channels = 3, but the network takes 4 input channels"),
    ({"channels": "4", "mean": "[0.3, 0.3, 0.3]"}, "preprocess.mean must be 4 numbers (one per input channel)"),
])
def test_card_entries_that_do_not_fit_the_bands_are_refused(bands, changes, text):
    card = bands / "wrong.toml"
    card.write_text(card_text(**changes))
    with pytest.raises(ModelCardError) as err:
        load_network(card)
    assert text in err.value.message
    assert_one_sentence(err.value.message)
