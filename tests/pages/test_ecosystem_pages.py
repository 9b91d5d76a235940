"""The Per-Sample and Compare pages with the networks of issue #21 (its done-when: "the Per-Sample and Compare pages
work (AppTest)"): a timm CNN card, a Hugging Face ViT model folder named by a card, a 1-channel timm card and a
multi-label (sigmoid) card on a Hugging Face ConvNeXt folder. All have random weights, are saved offline into one
models folder (IBA_MODELS_DIR), take 64-px crops and read their statistics from a tiny folder of PNGs of their own."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from streamlit.testing.v1 import AppTest

from page_helpers import clean

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from source_fixtures import FRUIT, save_hf_convnext, save_hf_vit  # noqa: E402

#: Every network here crops 64 px (timm cards: [preprocess]; the ViT's and ConvNeXt's image processors).
CROP = 64
#: Images in each card's statistics folder.
STATS_IMAGES = 4
PETS = ["cat", "dog", "parrot"]
FINDINGS = ["normal", "nodule", "effusion"]
LABELS = ["cloud", "water", "road", "forest"]
SMALL = "\n[preprocess]\nresize = 72\ncrop = 64\n"


@dataclass(frozen=True)
class Case:
    """One network of the models folder: its card's name, its class names, its input channels, its head."""

    name: str
    classes: tuple[str, ...]
    channels: int = 3
    head: str = "softmax"


CASES = [
    Case("pets", tuple(PETS)),  # timm:convnext_atto, a state_dict in safetensors
    Case("fruitvit", tuple(FRUIT)),  # a transformers save_pretrained folder; class names from its id2label
    Case("xray", tuple(FINDINGS), channels=1),  # timm:resnet18 with in_chans = 1
    Case("scenes", tuple(LABELS), head="sigmoid"),  # a transformers ConvNeXt folder, renamed labels, sigmoid head
]


def write_stats_images(folder: Path, mode: str, seed: int) -> None:
    """STATS_IMAGES random PNGs (mode "RGB" or "L", for the gray network) of 80 × 70 px."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for i in range(STATS_IMAGES):
        shape = (70, 80, 3) if mode == "RGB" else (70, 80)
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(folder / f"img{i}.png")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """The models folder: one subfolder per case with its card (<name>/<name>.toml), weights or model folder,
    class list where the card gives one, and images/ for its statistics."""
    import timm
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("ecosystem-models")

    pets = root / "pets"
    write_stats_images(pets / "images", "RGB", 1)
    torch.manual_seed(1)
    save_file(timm.create_model("convnext_atto", num_classes=len(PETS)).state_dict(), pets / "pets.safetensors")
    (pets / "classes.txt").write_text("\n".join(PETS) + "\n")
    (pets / "pets.toml").write_text('arch = "timm:convnext_atto"\nweights = "pets.safetensors"\n'
                                    'classes = "classes.txt"\nstats_images = "images"\n' + SMALL)

    vit = root / "fruitvit"
    write_stats_images(vit / "images", "RGB", 2)
    save_hf_vit(vit / "model")  # 64 × 64, the FRUIT names in its config
    (vit / "fruitvit.toml").write_text('model_folder = "model"\nstats_images = "images"\n')

    xray = root / "xray"
    write_stats_images(xray / "images", "L", 3)
    torch.manual_seed(2)
    torch.save(timm.create_model("resnet18", in_chans=1, num_classes=len(FINDINGS)).state_dict(), xray / "xray.pth")
    (xray / "classes.txt").write_text("\n".join(FINDINGS) + "\n")
    (xray / "xray.toml").write_text('arch = "timm:resnet18"\nweights = "xray.pth"\nclasses = "classes.txt"\n'
                                    'stats_images = "images"\n\n[arch_args]\nin_chans = 1\n' + SMALL)

    scenes = root / "scenes"
    write_stats_images(scenes / "images", "RGB", 4)
    save_hf_convnext(scenes / "model", num_labels=len(LABELS))  # shortest edge 64, crop_pct 0.875: a 64-px crop
    (scenes / "classes.txt").write_text("\n".join(LABELS) + "\n")
    (scenes / "scenes.toml").write_text('model_folder = "model"\nclasses = "classes.txt"\nhead = "sigmoid"\n'
                                        'stats_images = "images"\n')

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IBA_MODELS_DIR", str(root))
        yield root


def card_of(models: Path, case: Case) -> str:
    """The network menu's value for the case: its card's path."""
    return str((models / case.name / f"{case.name}.toml").resolve())



def choose(at: AppTest, models: Path, case: Case) -> AppTest:
    return clean(at.selectbox(key="network").set_value(card_of(models, case)).run())


def is_gray(picture) -> bool:
    """Whether an RGB picture's three channels are equal (a gray image drawn in RGB form)."""
    array = np.asarray(picture).astype(int)
    return array.ndim == 3 and bool((array[..., 0] == array[..., 1]).all() and (array[..., 1] == array[..., 2]).all())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_per_sample_page_runs_on_the_network(open_page, models: Path, case: Case) -> None:
    at = choose(open_page("per_sample"), models, case)
    assert f"{len(case.classes)} classes" in " ".join(c.value for c in at.caption)
    radio = next(r for r in at.radio if r.key and r.key.startswith("ps_target_"))
    assert radio.options and all(o.split(" · ")[0] in case.classes for o in radio.options), radio.options
    assert ("per label" in (radio.help or "")) == (case.head == "sigmoid")  # p(target) is the label's own

    at.number_input(key="ps_steps").set_value(2)
    at.number_input(key="ps_batch").set_value(4)
    at = clean(at.button(key="ps_run_button").click().run())
    record = at.session_state["ps_run"]
    assert record.model_key == f"card:{case.name}" and record.class_name in case.classes
    result = record.result
    assert result.head == case.head and 0 < result.p_without < 1
    assert len(result.history) == 2
    heatmap = result.heatmap
    assert heatmap.shape == (CROP, CROP) and np.isfinite(heatmap).all() and heatmap.std() > 0
    # A ViT's class token has no place on the image: its bits are counted apart (`per_sample.py`).
    assert (result.unlocated_bits > 0) == (case.name == "fruitvit")
    assert np.isclose(result.total_bits, heatmap.sum() + result.unlocated_bits, rtol=1e-4)
    # Statistics from the card's own folder of PNGs, not the sample photos.
    assert record.stats_description.startswith(f"{STATS_IMAGES} samples"), record.stats_description
    assert str(models / case.name / "images") in record.stats_description
    # The results show: the bits metric, the heatmap, the crop drawn in gray for a 1-channel network.
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Information used"] == f"{result.total_bits:,.0f} bits"
    assert any(c.key == "ps_heatmap" for c in at.get("plotly_chart"))
    assert np.asarray(record.cropped).shape == (CROP, CROP, 3)
    assert is_gray(record.cropped) == (case.channels == 1)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_the_compare_page_runs_on_the_network(open_page, models: Path, case: Case) -> None:
    methods = ["saliency", "gradient", "iba_10"]
    at = choose(open_page("compare"), models, case)
    assert at.selectbox(key=f"cmp_readout_card:{case.name}").value == "—"  # no readout trained for it
    at.multiselect(key="cmp_methods").set_value(methods)
    at = clean(at.button(key="cmp_run_button").click().run())
    last = at.session_state["cmp_last"]
    assert not last.failed and [k[4] for k in last.keys] == methods
    assert last.subject.class_name in case.classes
    cache = at.session_state["map_cache"]
    maps = {k[4]: cache.get(k).amap for k in last.keys}
    for key, amap in maps.items():
        assert amap.values.shape == (CROP, CROP) and np.isfinite(amap.values).all(), key
        assert amap.values.std() > 0, key
    assert maps["iba_10"].extra["stats_samples"] == STATS_IMAGES  # the card folder's images' statistics
    assert len(at.image) >= 1 + len(methods)  # the input and one picture per map
    captions = " ".join(c.value for c in at.caption)
    assert "Saliency" in captions and "Per-Sample IBA" in captions
    assert is_gray(last.cropped) == (case.channels == 1)
