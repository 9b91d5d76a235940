"""A multi-band network in the app (issue #21, point 3): a 4-band model card in the models folder, a .npy tile
uploaded to the Per-Sample page, shown as its composite with the bands named, and a run on it."""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from PIL import Image

from page_helpers import assert_clean

COVER = ["water", "forest", "field"]


def tile(seed: int, size: tuple[int, int] = (60, 72)) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.random((*size, 4)) * np.array([0.2, 0.4, 0.6, 0.8]) * 65535).astype(np.uint16)


@pytest.fixture(scope="module")
def bands_card(tmp_path_factory) -> str:
    """The models folder with bands/bands.toml: timm's ResNet-18 with in_chans = 4 and 3 classes (random weights),
    statistics from four 4-band .npy tiles, bands 3, 2, 1 (from 0: [2, 1, 0]) shown as red, green, blue."""
    import timm
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("models")
    folder = root / "bands"
    (folder / "tiles").mkdir(parents=True)
    torch.manual_seed(2)
    save_file(timm.create_model("resnet18", in_chans=4, num_classes=3).state_dict(), folder / "bands.safetensors")
    (folder / "classes.txt").write_text("\n".join(COVER) + "\n")
    for i in range(4):
        np.save(folder / "tiles" / f"tile{i}.npy", tile(10 + i))
    (folder / "bands.toml").write_text(
        'arch = "timm:resnet18"\nweights = "bands.safetensors"\nclasses = "classes.txt"\nstats_images = "tiles"\n'
        "display_bands = [2, 1, 0]\n\n[arch_args]\nin_chans = 4\n\n[preprocess]\nresize = 128\ncrop = 112\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IBA_MODELS_DIR", str(root))
        yield str((folder / "bands.toml").resolve())


def npy_upload(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def test_a_npy_tile_uploaded_for_a_4_band_card_is_shown_and_explained(open_page, bands_card: str) -> None:
    at = open_page("per_sample")
    at = at.selectbox(key="network").set_value(bands_card).run()
    assert_clean(at)
    # The sample photos are RGB: one sentence says to upload the network's own bands.
    assert any("sample photos are RGB, but the network takes 4-band images" in e.value for e in at.error)

    at = at.radio(key="image_source").set_value("Upload").run()
    assert_clean(at)
    assert any(".npy" in i.value for i in at.info), "the uploader says which files a 4-band network takes"
    at = at.file_uploader[0].set_value(("tile.npy", npy_upload(tile(1)), "application/octet-stream")).run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    captions = [c for im in at.image for c in im.captions]
    assert any("bands 3, 2, 1 of 4, numbered from 1, shown as red, green, blue" in c for c in captions), captions
    assert any("Top prediction:" in c for c in captions)

    at.number_input(key="ps_steps").set_value(2)
    at.number_input(key="ps_batch").set_value(4)
    at = at.button(key="ps_run_button").click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    record = at.session_state["ps_run"]
    assert record.model_key == "card:bands" and record.image_name == "tile.npy"
    heatmap = record.result.heatmap
    assert heatmap.shape == (112, 112) and np.isfinite(heatmap).all() and heatmap.std() > 0
    assert record.stats_description.startswith("4 samples")  # the card's folder of 4-band tiles
    assert np.asarray(record.cropped).shape == (112, 112, 3)  # the composite the views draw on

    # A JPEG is refused for this network, naming both channel counts.
    photo = io.BytesIO()
    Image.new("RGB", (80, 60), (10, 200, 30)).save(photo, format="JPEG")
    at = at.file_uploader[0].set_value(("photo.jpg", photo.getvalue(), "image/jpeg")).run()
    assert_clean(at)
    assert any("3-channel (RGB) image, but the network takes 4-band images" in e.value for e in at.error)
