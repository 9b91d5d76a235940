"""CoIBA in the app's state (issue #30): the Per-Sample record of a CoIBA run, the statistics a method reads, the
Dataset page's run line, the folder job's methods, and the β × layer grid's range row."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from iba_core.app import dataset as ds
from iba_core.app.state import COIBA_METHOD, RunRecord
from iba_core.app.stats_source import method_stats_layers, range_stats_description
from iba_core.coiba import default_range, layer_range
from iba_core.results import range_label
from iba_core.methods import get_method
from iba_core.networks import load_network

NETWORK = "efficientnet_lite0"


@pytest.fixture(scope="module")
def network():
    return load_network(NETWORK)


def record_of(result, layers: tuple[str, ...] = ()) -> RunRecord:
    from PIL import Image

    return RunRecord(image_name="cat photo.jpg", model_key=NETWORK, layer=layers[0] if layers else "block3_2",
                     class_name="Egyptian cat", cropped=Image.new("RGB", (8, 8)), result=result,
                     stats_description="32 crops", layers=layers)


def test_a_coiba_record_names_its_range_in_captions_files_and_report(network):
    from iba_core.coiba import CoIBABottleneck, CoIBASettings
    from iba_core.feature_stats import stats_for_layers as stats_for_range
    from iba_core.images import load_sample

    layers = layer_range(network, "block6_4", "block7_1")
    stats = stats_for_range(network, layers)
    x = network.preprocess(load_sample("chelsea"))
    result = CoIBABottleneck.for_network(network, layers, stats, CoIBASettings(steps=1, batch=1)).attribute(x)
    record = record_of(result, tuple(layers))
    assert record.where == f"CoIBA at 2 layers, {range_label('block6_4', 'block7_1')}"
    assert record.file_stem == f"coiba_cat_photo_{NETWORK}_block6_4-block7_1"
    report = record.report()
    assert report["method"] == COIBA_METHOD and report["layers"] == ["block6_4", "block7_1"]
    assert report["layer"] == "block6_4" and report["results"]["total_bits"] == pytest.approx(result.total_bits)
    # the one-layer bottleneck's record is as before
    plain = record_of(result)
    assert plain.where == "layer block3_2" and plain.file_stem == f"iba_cat_photo_{NETWORK}_block3_2"
    assert "layers" not in plain.report() and plain.report()["method"] != COIBA_METHOD


def test_the_statistics_a_method_reads(network):
    assert method_stats_layers(network, get_method("iba_10")) == [network.spec.default_layer]
    assert method_stats_layers(network, get_method("iba_10", layer="stem")) == ["stem"]
    assert method_stats_layers(network, get_method("coiba")) == layer_range(network, *default_range(network))
    assert method_stats_layers(network, get_method("coiba", layers=("block6_4", "block7_1"))) == [
        "block6_4", "block7_1"]


def test_range_statistics_are_described_once_when_they_agree():
    same = SimpleNamespace(describe=lambda: "32 crops of 13 photos")
    other = SimpleNamespace(describe=lambda: "1000 samples from /data")
    assert range_stats_description({"a": same, "b": same}) == (
        "32 crops of 13 photos, for each of the 2 layers of the range")
    assert range_stats_description({"a": same, "b": other}) == "a: 32 crops of 13 photos; b: 1000 samples from /data"


def test_the_dataset_page_names_coiba_runs_range():
    run = SimpleNamespace(info={"network": NETWORK, "layer": "block6_4", "methods": {
        "coiba": {"name": "CoIBA", "settings": {"layers": ["block6_4", "block7_1"], "beta_k": 10.0}},
        "saliency": {"name": "Saliency", "settings": {}},
    }})
    assert ds.layer_text(run) == f"CoIBA {range_label('block6_4', 'block7_1')}"
    run.info["methods"]["iba_10"] = {"name": "Per-Sample", "settings": {"layer": "block3_2"}}
    assert ds.layer_text(run) == f"block3_2, CoIBA {range_label('block6_4', 'block7_1')}"
    assert ds.run_line(run).startswith(f"network {NETWORK} · layer block3_2, CoIBA ")


def test_a_folder_job_gives_the_layer_to_one_layer_bottlenecks_only(network):
    from iba_core.app.folder_job import checked_methods

    shared = SimpleNamespace(network=network)
    iba, coiba = checked_methods(shared, ["iba_10", "coiba"], "stem")
    assert iba.settings["layer"] == "stem"
    assert coiba.settings["layers"] is None  # CoIBA keeps its range (the default one)


def test_the_range_row_runs_from_each_depth_layer_to_the_last(network):
    from iba_core.beta_layer import GridKey, bottleneck_place, cell_name, depth_layers, grid_runs, range_row
    from iba_core.per_sample import BottleneckSettings

    firsts, last = range_row(network, "block3_2")
    assert last == default_range(network)[1]
    order = list(network.spec.layers)
    assert firsts == [n for n in depth_layers(network.spec, include="block3_2") if order.index(n) <= order.index(last)]
    assert "block3_2" in firsts
    assert cell_name(10.0, "block3_2", last) == f"β·k = 10 at CoIBA {range_label('block3_2', last)}"
    assert bottleneck_place("block3_2") == "block3_2"
    # the range cell at block3_2 is not the β row's block3_2 cell at β·k = 10: both are computed
    assert len(grid_runs((10.0,), "block3_2", firsts, last)) == 1 + len(firsts)
    assert len(grid_runs((10.0,), "block3_2", firsts)) == len(firsts)
    s = BottleneckSettings(steps=3)
    plain = GridKey.of("img", network, "block3_2", 285, s, "photos:32")
    ranged = GridKey.of("img", network, "block3_2", 285, s, "photos:32", axis="range")
    assert plain.last == "" and ranged.last == last and ranged.layers == tuple(firsts)
    assert plain.digest != ranged.digest
    with pytest.raises(ValueError):
        GridKey.of("img", network, "block3_2", 285, s, "photos:32", axis="ranges")


def test_a_grid_with_a_range_row_computes_coiba_cells(network, tmp_path, monkeypatch):
    from iba_core.beta_layer import GridKey, beta_layer_grid, cached_grid
    from iba_core.coiba import CoIBABottleneck, CoIBASettings
    from iba_core.feature_stats import stats_for_run
    from iba_core.images import load_sample
    from iba_core.per_sample import BottleneckSettings

    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    x = network.preprocess(load_sample("chelsea"))
    base = BottleneckSettings(steps=1, batch=1, sigma=2.0)
    assert CoIBASettings.for_range_row(base, 10.0) == CoIBASettings(steps=1, batch=1, beta_k=10.0, placement="output")  # its own σ_s
    ranges: list[list[str]] = []
    ranges: list[list[str]] = []

    def range_stats(names: list[str]) -> dict:
        ranges.append(list(names))
        return {n: stats_for_run(network, n) for n in names}

    cells = beta_layer_grid(network, x, 285, "block6_4", lambda name: stats_for_run(network, name), betas=(10.0,),
                            layers=["block6_3"], settings=base, last="block7_1", range_stats_for=range_stats)
    assert [(c.row, c.layer, c.last) for c in cells] == [("beta", "block6_4", ""), ("layer", "block6_3", "block7_1")]
    assert ranges == [["block6_3", "block7_1"]]  # one pass for the range's layers not read yet (block6_4 was)
    assert cells[1].label == range_label("block6_3", "block7_1") and cells[1].name.endswith("CoIBA " + cells[1].label)
    layers = ["block6_3", "block6_4", "block7_1"]
    bottleneck = CoIBABottleneck.for_network(network, layers, {n: stats_for_run(network, n) for n in layers},
                                             CoIBASettings.for_range_row(base, 10.0))
    expected = bottleneck.attribute(x, 285)
    np.testing.assert_allclose(cells[1].heatmap, expected.heatmap, rtol=1e-4, atol=1e-6)
    assert cells[1].total_bits == pytest.approx(expected.total_bits, rel=1e-4)
    # kept on disk with its range, and read back as computed
    key = GridKey.of("img", network, "block6_4", 285, base, "x", layers=["block6_3"], betas=(10.0,), axis="range")
    cached_grid(key, lambda: cells)
    again, was_cached = cached_grid(key, lambda: pytest.fail("recomputed"))
    assert was_cached and [(c.layer, c.last) for c in again] == [(c.layer, c.last) for c in cells]
