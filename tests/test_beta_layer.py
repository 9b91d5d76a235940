"""β × layer grid (iba_core.beta_layer)."""
from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from iba_core.beta_layer import (
    DEFAULT_BETAS,
    GRID_LOST_MESSAGE,
    LAYER_ROW_BETA,
    GridCell,
    GridKey,
    beta_layer_grid,
    cached_grid,
    depth_layers,
    grid_cache_path,
    grid_target_note,
    lost_class_cells,
    lost_class_warning,
)
from iba_core.images import load_sample
from iba_core.networks import REGISTRY, UnknownModelError, get_spec, load_network
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck, bottleneck_lost_class
from iba_core.feature_stats import get_stats


def test_depth_layers_reproduce_the_papers_resnet_row() -> None:
    assert depth_layers(get_spec("resnet50")) == ["conv1", "conv2_3", "conv3_4", "conv4_6", "conv5_3"]


@pytest.mark.parametrize("key", list(REGISTRY))
def test_depth_layers_spread_in_order_and_include_the_default(key: str) -> None:
    spec = get_spec(key)
    layers = depth_layers(spec)
    assert len(layers) == 5 and len(set(layers)) == 5
    assert spec.default_layer in layers
    positions = [spec.layers.index(name) for name in layers]
    assert positions == sorted(positions)
    stage = lambda name: name.split("_")[0]  # noqa: E731
    assert stage(layers[0]) == stage(spec.layers[0])  # from the first stage…
    assert positions[-1] == len(spec.layers) - 1  # …to the deepest layer


def test_depth_layers_swap_in_a_chosen_layer() -> None:
    spec = get_spec("vgg16")
    layers = depth_layers(spec, include="conv2_1")
    assert "conv2_1" in layers and len(layers) == 5
    assert depth_layers(spec, count=3) == ["conv1_2", "conv4_1", "conv5_3"]  # default conv4_1 swapped in
    with pytest.raises(UnknownModelError):
        depth_layers(spec, include="conv9_9")


@pytest.fixture(scope="module")
def network():
    # One torch thread: on a busy 2-core machine two OpenMP workers stall each other (runs 3–5× slower).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield load_network("efficientnet_lite0")
    finally:
        torch.set_num_threads(threads)


@pytest.fixture
def stats_for(network, tmp_path, monkeypatch):
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path))
    calls: list[str] = []

    def get(layer: str):
        calls.append(layer)
        return get_stats(network, layer, n=8)

    get.calls = calls
    return get


def test_grid_has_ten_finite_cells(network, stats_for, monkeypatch) -> None:
    runs: list[tuple[float, int]] = []
    original = PerSampleBottleneck.attribute

    def counting(self, x, target=None, callback=None):
        runs.append((self.settings.beta_k, target))
        return original(self, x, target, callback)

    monkeypatch.setattr(PerSampleBottleneck, "attribute", counting)
    x = network.preprocess(load_sample("chelsea"))
    progress: list[tuple[int, int, str]] = []
    seen = []
    cells = beta_layer_grid(
        network, x, None, "block3_2", stats_for, settings=BottleneckSettings(steps=2, batch=2),
        progress=lambda d, t, label: progress.append((d, t, label)), on_cell=seen.append,
    )
    assert len(cells) == 10 and seen == cells
    assert [c.row for c in cells] == ["beta"] * 5 + ["layer"] * 5
    assert [c.beta_k for c in cells[:5]] == list(DEFAULT_BETAS)
    assert all(c.layer == "block3_2" for c in cells[:5])
    assert all(c.beta_k == LAYER_ROW_BETA for c in cells[5:])
    assert [c.label for c in cells[5:]] == depth_layers(network.spec, include="block3_2")
    for c in cells:
        assert c.heatmap.shape == (224, 224)
        assert np.isfinite(c.heatmap).all() and (c.heatmap >= 0).all()
        assert 0.0 <= c.p_with <= 1.0
        assert c.total_bits == pytest.approx(float(c.heatmap.sum()), rel=1e-3)
        assert 0.0 <= c.p_without <= 1.0 and c.lost_class == bottleneck_lost_class(c.p_without, c.p_with)
    # Before each cell: how many are done and which runs now; at the end, all done.
    assert [p[0] for p in progress] == list(range(0, 11)) and all(p[1] == 10 for p in progress)
    assert [p[2] for p in progress] == [c.name for c in cells] + ["done"]
    assert progress[0][2] == "β·k = 0.1 at block3_2"

    # target=None explains the top-1 class (285, Egyptian cat) in every cell.
    assert {t for _, t in runs} == {285}
    # (β·k = 10, block3_2) appears in both rows but runs once; statistics once per layer.
    assert len(runs) == 9
    assert sorted(stats_for.calls) == sorted(set(stats_for.calls)) and len(stats_for.calls) == 5


def test_grid_with_explicit_layers_and_betas(network, stats_for) -> None:
    x = network.preprocess(load_sample("coffee"))
    cells = beta_layer_grid(
        network, x, 967, "block2_2", stats_for, betas=(1.0, 100.0), layers=["stem", "head"],
        settings=BottleneckSettings(steps=1, batch=1),
    )
    assert [(c.row, c.beta_k, c.layer) for c in cells] == [
        ("beta", 1.0, "block2_2"), ("beta", 100.0, "block2_2"), ("layer", 10.0, "stem"), ("layer", 10.0, "head"),
    ]


def test_grid_rejects_unknown_layer(network, stats_for) -> None:
    x = torch.zeros(1, 3, 224, 224)
    with pytest.raises(UnknownModelError):
        beta_layer_grid(network, x, 0, "no_such_layer", stats_for)


def test_beta_1000_cell_says_the_bottleneck_lost_the_class(network, stats_for) -> None:
    """Paper §4.1: β ≥ 1000/k discards all information; the grid cell carries the flag."""
    x = network.preprocess(load_sample("chelsea"))
    cells = beta_layer_grid(network, x, 285, "block3_2", stats_for, betas=(10.0, 1000.0), layers=[],
                            settings=BottleneckSettings(steps=5, batch=2, precision="fp32"))
    kept, lost = cells
    assert lost.lost_class and not kept.lost_class
    assert lost.p_with < 0.1 * lost.p_without and lost.total_bits < kept.total_bits
    assert lost_class_cells(cells) == [lost]
    assert lost_class_warning(cells).startswith("β·k = 1000 at block3_2 (p = 0.")
    assert lost_class_warning([kept]) == ""


def test_lost_class_warning_names_each_lost_cell_once() -> None:
    heat = np.zeros((4, 4), np.float32)
    lost = GridCell("beta", "β·k = 10", 10.0, "stem", heat, 0.001, 3.0, 0.5, True)
    cells = [lost, GridCell("beta", "β·k = 1", 1.0, "stem", heat, 0.4, 9.0, 0.5, False),
             GridCell("layer", "stem", 10.0, "stem", heat, 0.001, 3.0, 0.5, True),  # the same run, other row
             GridCell("layer", "head", 10.0, "head", heat, 0.002, 1.0, 0.5, True)]
    assert [c.name for c in lost_class_cells(cells)] == ["β·k = 10 at stem", "β·k = 10 at head"]
    text = lost_class_warning(cells)
    assert text == ("β·k = 10 at stem (p = 0.00, without the bottleneck 0.50); "
                    "β·k = 10 at head (p = 0.00, without the bottleneck 0.50): " + GRID_LOST_MESSAGE + ".")


# ---- the explained class and the network's top-1 ------------------------------------------------------------


def cell(row: str = "beta", beta_k: float = 10.0, layer: str = "block3_2", p_with: float = 0.5,
         p_without: float = 0.4, target: int = 285, predicted: int = 285, heat: np.ndarray | None = None) -> GridCell:
    heat = np.full((8, 8), beta_k, np.float32) if heat is None else heat
    return GridCell(row, f"β·k = {beta_k:g}" if row == "beta" else layer, beta_k, layer, heat, p_with,
                    float(heat.sum()), p_without, bottleneck_lost_class(p_without, p_with), target, predicted, 0.4)


def test_grid_cells_know_the_networks_top1(network, stats_for) -> None:
    x = network.preprocess(load_sample("chelsea"))
    cells = beta_layer_grid(network, x, 281, "block3_2", stats_for, betas=(10.0,), layers=[],
                            settings=BottleneckSettings(steps=1, batch=1))
    assert cells[0].target == 281 and cells[0].predicted == 285  # tabby explained; Egyptian cat predicted
    assert cells[0].p_predicted == pytest.approx(network.top_k(x, 1)[0][2], rel=1e-4)


def test_one_target_note_for_the_grid() -> None:
    # Recognised: the top-1 with p ≥ 10 % → no note, whatever the cells' p with the bottleneck.
    assert grid_target_note([cell(p_without=0.36), cell(beta_k=0.1, p_with=0.9, p_without=0.36)]) == ""
    assert grid_target_note([]) == ""
    # A class the network hardly predicts: one note, p with the bottleneck from the β row's β·k = 10 cell.
    low = [cell(beta_k=b, p_with=p, p_without=0.034, predicted=722) for b, p in ((0.1, 0.99), (10.0, 0.938))]
    low.append(cell(row="layer", layer="stem", p_with=0.2, p_without=0.034, predicted=722))
    note = grid_target_note(low)
    assert note.startswith("The network does not recognise this image as the explained class")
    assert "only 3.4 %" in note and "not the network's top prediction" in note
    assert "rises to 93.8 %" in note and "the β·k = 10 at block3_2 cell" in note
    # Not the top-1, but p high enough and falling with the bottleneck: the reason, no rise sentence.
    note = grid_target_note([cell(p_with=0.1, p_without=0.3, predicted=1)])
    assert "not the network's top prediction" in note and "rises" not in note and "only" not in note


# ---- kept on disk, for every session ------------------------------------------------------------------------


@pytest.fixture
def disk(tmp_path, monkeypatch):
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path))
    return tmp_path


def grid_key(image: str = "digest", steps: int = 3, layer: str = "block3_2", stats: str = "offline-photos-13:32"):
    return GridKey.of(image, load_network_key(), layer, 285, BottleneckSettings(steps=steps), stats)


def load_network_key():
    """What GridKey reads of a network: its key, weights and spec (no model needed)."""
    from types import SimpleNamespace

    return SimpleNamespace(key="efficientnet_lite0", weights_id="w.pth", spec=get_spec("efficientnet_lite0"))


def counting(cells: list[GridCell]):
    def compute() -> list[GridCell]:
        compute.calls += 1
        return cells

    compute.calls = 0
    return compute


def some_cells() -> list[GridCell]:
    rng = np.random.default_rng(0)
    return [cell(beta_k=b, heat=rng.random((224, 224), np.float32) * b, p_with=0.5 / b, predicted=281)
            for b in DEFAULT_BETAS] + [cell(row="layer", layer="stem", heat=rng.random((224, 224), np.float32))]


def test_a_second_session_gets_the_grid_from_disk_without_computing(disk) -> None:
    cells = some_cells()
    compute = counting(cells)
    first, cached = cached_grid(grid_key(), compute)
    assert (first, cached, compute.calls) == (cells, False, 1)
    again, cached = cached_grid(grid_key(), compute)  # a new session: a key built anew, same inputs
    assert cached and compute.calls == 1
    assert len(again) == len(cells)
    for a, b in zip(again, cells):
        assert a.heatmap.dtype == np.float32 and np.array_equal(a.heatmap, b.heatmap)  # bit for bit
        assert float(a.heatmap.sum()) == pytest.approx(b.total_bits, rel=1e-4)
        assert (a.row, a.label, a.beta_k, a.layer, a.target, a.predicted, a.lost_class) == \
            (b.row, b.label, b.beta_k, b.layer, b.target, b.predicted, b.lost_class)
        assert (a.p_with, a.p_without, a.total_bits, a.p_predicted) == (b.p_with, b.p_without, b.total_bits,
                                                                         b.p_predicted)
    # Any other input computes: another setting, image, layer or statistics.
    for other in (grid_key(steps=4), grid_key(image="other"), grid_key(layer="stem"), grid_key(stats="x:32")):
        assert cached_grid(other, compute)[1] is False
    assert compute.calls == 5


def test_a_damaged_grid_file_is_rebuilt(disk) -> None:
    key, compute = grid_key(), counting(some_cells())
    cached_grid(key, compute)
    path = grid_cache_path(key)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # a crash half-way through a copy
    with pytest.warns(UserWarning, match="unusable"):
        cells, cached = cached_grid(key, compute)
    assert not cached and compute.calls == 2 and len(cells) == 6
    assert cached_grid(key, compute)[1] and compute.calls == 2  # the rebuilt file serves the next session


def test_the_grid_cache_keeps_the_newest(disk, monkeypatch) -> None:
    monkeypatch.setattr("iba_core.beta_layer.MAX_CACHED_GRIDS", 2)
    compute = counting(some_cells()[:2])
    keys = [grid_key(image=f"img{i}") for i in range(3)]
    for i, key in enumerate(keys):
        cached_grid(key, compute)
        os.utime(grid_cache_path(key), (1000.0 + i, 1000.0 + i))  # file times apart, oldest first
    cached_grid(keys[0], compute)  # computed again (pruned), now the newest
    assert compute.calls == 4
    assert sorted(p.name for p in (disk / "grids").glob("*.npz")) == sorted(
        grid_cache_path(k).name for k in (keys[0], keys[2]))


def test_grid_runs_counts_the_shared_cell_once() -> None:
    from iba_core.beta_layer import grid_runs

    runs = grid_runs(DEFAULT_BETAS, "block3_2", ["stem", "block3_2", "head"])
    assert len(runs) == 7 and runs.count((LAYER_ROW_BETA, "block3_2")) == 1
    assert runs[:5] == [(float(b), "block3_2") for b in DEFAULT_BETAS]


def test_grid_progress_text_names_the_cell_and_the_time_left() -> None:
    from iba_core.beta_layer import grid_progress_text

    first = grid_progress_text(0, 10, "β·k = 0.1 at block3_2", None)
    assert first.startswith("Cell 1 of 10: β·k = 0.1 at block3_2") and "after the first cell" in first
    later = grid_progress_text(3, 10, "β·k = 100 at block3_2", 95.0)
    assert later == "Cell 4 of 10: β·k = 100 at block3_2 · about 1.6 min left"
    assert grid_progress_text(10, 10, "done", 0.0) == "10 of 10 cells done"
