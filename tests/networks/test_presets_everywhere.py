"""Every preset of the bottleneck family (`iba`, `coiba`, `m2ib`) runs in every precision on every kind of network:
registered (the offline network's stage list), torchvision, a timm folder, a Hugging Face folder and a model card,
split by stages, a torch.fx cut or forward hooks. A lower precision is forced (bf16 runs on any CPU, emulated where
the CPU lacks it), so the path a bf16 CPU takes by default is tested on every machine."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from card_fixtures import make_card_folder
from iba_core.images import load_image
from iba_core.methods import get_method
from iba_core.networks import load_network
from source_fixtures import save_hf_vit, save_timm_folder, write_image

pytestmark = pytest.mark.usefixtures("one_thread")

KINDS = ("registered", "torchvision", "timm", "hf", "card", "clip")
#: How each network kind runs each preset: a registered stage list, a torch.fx cut, or forward hooks on the whole
#: network (transformers' ViT cannot be traced; CoIBA's later layers are hooked wherever the cut has no stages).
PATHS = {"registered": ("stages", "stages", "stages"), "torchvision": ("fx", "hook", "fx"), "timm": ("fx", "hook", "fx"),
         "hf": ("hook", "hook", "hook"), "card": ("fx", "hook", "fx"), "clip": ("stages", "hook", "stages")}
PRESETS = ("iba", "coiba", "m2ib")
QUICK = dict(steps=2, batch=2, stats_samples=4)


@pytest.fixture(scope="module")
def networks(tmp_path_factory):
    root = tmp_path_factory.mktemp("preset-networks")
    built: dict = {}

    def get(kind: str):
        if kind not in built:
            if kind == "registered":
                built[kind] = load_network("efficientnet_lite0")
            elif kind == "torchvision":
                built[kind] = load_network("torchvision:resnet18", weights="random")
            elif kind == "timm":
                built[kind] = load_network(str(save_timm_folder(root / "vit", "vit_tiny_patch16_224", img_size=64,
                                                                depth=3, embed_dim=32, num_heads=2)))
            elif kind == "hf":
                built[kind] = load_network(str(save_hf_vit(root / "hf")))
            elif kind == "clip":  # its outputs: the similarity to the prompts (the target: the first)
                import sys

                sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
                from clip_fixtures import save_tiny_clip

                built[kind] = load_network(f"clip:{save_tiny_clip(root / 'clip')}")
                built[kind].set_prompts(["a cat", "a dog"])
            else:
                built[kind] = load_network(str(make_card_folder(root / "card") / "fruit.toml"))
        return built[kind]

    return get


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    return load_image(write_image(tmp_path_factory.mktemp("preset-image") / "img.png"))


@pytest.fixture
def lower_precision_cpu(monkeypatch, tmp_path):
    """A CPU with bf16 and fp16 matrix instructions (faked: torch runs both on any CPU, emulated where the real one
    lacks them) and a fresh precision memo, so "auto" measures here as on such a CPU."""
    from iba_core import precision

    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx512_bf16", "amx_bf16", "avx512_fp16"})
    monkeypatch.setattr(precision, "cuda_bf16", lambda: False)
    monkeypatch.setattr(precision, "_disk_choices", lambda: tmp_path / "precision.json")


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16", "auto"])
@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_preset_in_every_precision_on_every_kind(networks, image, kind, preset, precision, lower_precision_cpu):
    net = networks(kind)
    net.memo.precision.clear()  # "auto" measures again, on the faked CPU
    method = get_method(preset, precision=precision, **QUICK)
    amap = method.attribute(net, net.preprocess(image), 0)
    crop = net.spec.crop
    assert amap.values.shape == (crop, crop) and np.isfinite(amap.values).all() and amap.values.min() >= 0
    extra = amap.extra
    assert extra["total_bits"] > 0 and -1 <= extra["p_with"] <= 1  # a CLIP model's similarity: −1 … 1
    assert extra["precision"] == precision if precision != "auto" else extra["precision"] in ("fp32", "bf16")
    assert extra["path"] == PATHS[kind][PRESETS.index(preset)]  # stages, fx-split and hook paths all covered
    located = extra["total_bits"] - extra["unlocated_bits"]
    assert float(amap.values.sum()) == pytest.approx(located, rel=2e-3)
    if preset == "coiba":
        transformer = kind in ("timm", "hf", "clip")
        assert extra["placement"] == ("branch" if transformer else "output")
        if transformer:
            assert all(layer.rsplit(".", 1)[-1] in ("norm1", "layernorm_before", "layer_norm1")
                       for layer in extra["layers"])


def test_a_folder_run_with_the_branch_placement_links_its_range_by_blocks(tmp_path, monkeypatch):
    """A ViT folder run of the `coiba` preset records the branch inputs (blocks.1.norm1 …); the Dataset page's link of
    its rows names the blocks, as the Per-Sample page's range picker does (an unknown layer would drop the range)."""
    from urllib.parse import parse_qs, urlsplit

    from iba_core.app import dataset_gallery
    from iba_core.cli import main
    from iba_core.runs import open_run
    from iba_core.trust import Trust

    model = save_timm_folder(tmp_path / "data" / "vit", "vit_tiny_patch16_224", img_size=64, depth=3, embed_dim=32,
                             num_heads=2)
    images = tmp_path / "data" / "images"
    images.mkdir()
    write_image(images / "a.png")
    run_dir = tmp_path / "data" / "run"
    assert main(["attribute", str(images), "--model", str(model), "--methods", "coiba", "--steps", "2", "--batch",
                 "2", "--n", "4", "--out", str(run_dir), "--no-progress"]) == 0
    run = open_run(run_dir)
    settings = run.info["methods"]["coiba"]["settings"]
    assert settings["placement"] == "branch" and settings["layers"] == ["blocks.1.norm1", "blocks.2.norm1"]
    monkeypatch.setenv("IBA_DATA_DIRS", str(tmp_path / "data"))
    link = dataset_gallery.per_sample_link(run, run.table.iloc[0], Trust.for_app())
    params = parse_qs(urlsplit(link).query)
    assert params["range"] == ["blocks.1:blocks.2"] and params["layer"] == ["blocks.1"]
    # --placement reaches CoIBA in a folder run (--methods), and the run's links keep the layers' own names
    other = tmp_path / "data" / "run-output"
    assert main(["attribute", str(images), "--model", str(model), "--methods", "coiba", "--placement", "output",
                 "--steps", "2", "--batch", "2", "--n", "4", "--out", str(other), "--no-progress"]) == 0
    run = open_run(other)
    (key, method), = run.info["methods"].items()
    assert key == "coiba_1_output" and method["settings"]["placement"] == "output"
    assert all("norm1" not in layer for layer in method["settings"]["layers"])
