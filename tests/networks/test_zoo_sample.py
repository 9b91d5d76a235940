"""The zoo benchmark's fixed CI sample (benchmarks/zoo_models.py `SAMPLE`): 16 families — CNNs (ResNet,
EfficientNet, ConvNeXt, RegNet, DenseNet), ViT, ViT with register tokens, ViT without a class token, DeiT (distilled:
two extra tokens), Swin, EVA-02, LeViT (a hybrid), MLP-Mixer, and Hugging Face's ViT, ConvNeXt and Swin — at tiny
sizes, random weights, saved as users save them and loaded from their folders with no code, as `--model FOLDER` is.

Each (family, method) works (a finite map) or says why in one sentence (`available_for`, or the UserError a user
sees); `EXPECTED_TO_WORK` states what must work. The default layer follows the stated rule (`spec.default_layer_of`:
a transformer's middle block, a CNN's last map with sides of at least 0.9 of an eighth of the input's, 25 at 224
px) and CoIBA's default range runs from it to the last block or grid (`coiba.default_range`)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from zoo_models import SAMPLE, build_sample  # noqa: E402

from iba_core.errors import UserError  # noqa: E402
from iba_core.methods import get_method  # noqa: E402

METHODS = ("iba", "coiba", "grad_cam", "grad_cam_pp", "layer_cam", "eigen_cam", "saliency", "readout")
#: Cheap settings: one step of one copy (the defaults are the paper's 10 × 10), fp32 (no precision measurement).
CHEAP = {"iba": {"steps": 1, "batch": 1, "precision": "fp32"}, "coiba": {"steps": 1, "batch": 1, "precision": "fp32"}}
CNNS = {"timm:resnet", "timm:efficientnet", "timm:convnext", "timm:regnet", "timm:densenet", "hf:convnext"}
EVERYWHERE = {"iba", "coiba", "saliency"}
CAMS = {"grad_cam", "grad_cam_pp", "layer_cam", "eigen_cam"}
#: What must work, per family: the bottlenecks, saliency and the CAMs everywhere (on a transformer they read the
#: tokens on their patch grid, class, distillation and register tokens dropped); the readout nowhere without a
#: trained checkpoint (it says so: the benchmark trains a tiny one per model).
EXPECTED_TO_WORK = {family: EVERYWHERE | CAMS for family in SAMPLE}
#: A word the reason of a method that cannot run names.
REASON_WORDS = {"readout": "readout checkpoint", **{key: "Grad-CAM layer" for key in CAMS}}


def _is_one_sentence(text: str) -> bool:
    return bool(text) and "\n" not in text and text.rstrip().endswith(".") and not re.search(r"[.!?]\s+[A-Z]", text)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """family → (network loaded from its folder, the chelsea photo through its preprocessing, its top-1)."""
    from iba_core.images import load_sample
    from iba_core.networks import load_network

    root, loaded = tmp_path_factory.mktemp("zoo"), {}

    def get(family: str):
        if family not in loaded:
            network = load_network(str(build_sample(family, root / family.replace(":", "-"))))
            x = network.preprocess(load_sample("chelsea"))
            loaded[family] = (network, x, network.top_k(x, 1)[0][0])
        return loaded[family]

    return get


@pytest.fixture(autouse=True)
def few_samples(monkeypatch, tmp_path_factory):
    """Statistics from 4 crops of the offline photos, in a cache of this module's own."""
    monkeypatch.setenv("IBA_STATS_SAMPLES", "4")
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "zoo-cache"))


def run(network, x, target, key: str) -> tuple[str, str]:
    """("works", "") or ("says_why", the sentence a user sees); any other exception fails the test (a bug)."""
    method = get_method(key, **CHEAP.get(key, {}))
    reason = method.available_for(network)
    if reason is not None:
        return "says_why", reason
    try:
        amap = method.attribute(network, x, target)
    except UserError as err:
        return "says_why", err.message
    assert amap.values.shape == tuple(x.shape[-2:]) and np.isfinite(amap.values).all()
    return "works", ""


@pytest.mark.parametrize("family", list(SAMPLE))
def test_every_method_works_or_says_why_in_one_sentence(zoo, family):
    network, x, target = zoo(family)
    outcomes = {key: run(network, x, target, key) for key in METHODS}
    works = {key for key, (status, _) in outcomes.items() if status == "works"}
    assert works == EXPECTED_TO_WORK[family], outcomes
    for key, (status, reason) in outcomes.items():
        if status == "says_why":
            assert _is_one_sentence(reason), (key, reason)
            assert REASON_WORDS.get(key, "") in reason, (key, reason)


def expected_default_layer(network) -> str:
    """The stated rule, worked out from the layer table: a transformer's middle block ((n − 1) // 2); a CNN's last
    map whose sides are both at least 0.9 of an eighth of the input's (25 at 224 px), else its first usable layer."""
    blocks = network.blocks()
    if blocks:
        return blocks[(len(blocks) - 1) // 2]
    usable = [info for info in network.layer_table() if info.usable and info.name in network.spec.layers]
    least = int(0.9 * network.spec.crop / 8)
    big = [info.name for info in usable if info.kind == "map" and min(info.shape[-2:]) >= least]
    return big[-1] if big else usable[0].name


@pytest.mark.parametrize("family", list(SAMPLE))
def test_the_default_layer_and_coiba_range_follow_the_stated_rule(zoo, family):
    from iba_core.coiba import default_range

    network, _, _ = zoo(family)
    layer = network.spec.default_layer
    assert layer == expected_default_layer(network)
    first, last = default_range(network)
    assert first == layer
    layers = list(network.spec.layers)
    assert layers.index(last) >= layers.index(first)
    blocks = network.blocks()
    assert (family in CNNS) == (not blocks)
    if blocks:  # a transformer: the middle block to the last block
        assert last == blocks[-1]
    else:  # a CNN: to the last map on a grid larger than 1 × 1
        table = {info.name: info for info in network.layer_table()}
        on_grid = [name for name in layers[layers.index(first):]
                   if name in table and table[name].kind == "map" and max(table[name].shape[-2:]) > 1]
        assert last == on_grid[-1]


def test_the_docs_table_is_what_the_benchmark_writes_from_its_results_file():
    """docs/operations/model-zoo.md's table is regenerated from docs/zoo.jsonl by the benchmark's own writer (never
    edited by hand): the page holds exactly what `bench_zoo.py --write-docs --results docs/zoo.jsonl` writes."""
    import zoo_report

    root = Path(__file__).resolve().parents[2]
    page = (root / "docs" / "operations" / "model-zoo.md").read_text()
    records = zoo_report.read_results(root / "docs" / "zoo.jsonl")
    assert len(records) > 16 and all("family" in r for r in records[1:])
    assert zoo_report.page_part(page) == zoo_report.generated(records, root / "docs" / "zoo.jsonl", root)
    for r in records[1:]:  # every family that did not run, and every method that did not work, says why in the page
        for family, what, status, reason in zoo_report.failures([records[0], r]):
            assert reason and reason in page, (family, what, status)
