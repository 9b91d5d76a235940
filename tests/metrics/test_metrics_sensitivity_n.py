import numpy as np
import pytest
import torch
from torch import nn

from iba_core.metrics.sensitivity_n import (
    correlations,
    format_table,
    logit_drops,
    n_values,
    pearson,
)
from reference_impl import remove_tiles
from metric_helpers import SIZE, TILE, Counting

N_TILES = (SIZE // TILE) ** 2


def sensitivity_n_correlations(model, x, attribution, target, tile, **kwargs):
    """(ns, correlations) for one image and one map: the metric's two steps."""
    drops = logit_drops(model, x, target, tile, **kwargs)
    return drops.ns, correlations(drops, attribution, x)


def occlusion_map(model, x, target, tile):
    """Exact per-tile drop of the target logit when that tile is zeroed, spread over the tile."""
    rows, cols = x.shape[-2] // tile, x.shape[-1] // tile
    with torch.no_grad():
        base = model(x)[0, target]
        out = np.zeros(x.shape[-2:])
        for t in range(rows * cols):
            drop = base - model(remove_tiles(x, [t], tile, fill=torch.zeros(3, 1, 1)))[0, target]
            r, c = divmod(t, cols)
            out[r * tile:(r + 1) * tile, c * tile:(c + 1) * tile] = float(drop) / tile**2
    return out


def test_occlusion_with_matching_tiles_correlates_perfectly_at_n_equal_one(small_net):
    x = torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(0))
    attr = occlusion_map(small_net, x, 1, TILE)
    ns, corr = sensitivity_n_correlations(small_net, x, attr, 1, TILE, n_count=6, sets=40)
    assert ns[0] == 1 and ns[-1] == round(0.8 * N_TILES)
    assert corr[0] == pytest.approx(1.0, abs=1e-9)
    assert np.all(corr[1:] < 1.0)  # the net is not linear: larger sets interact


def test_linear_model_with_gradient_times_input_correlates_at_every_n():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * SIZE * SIZE, 4)).eval()
    x = torch.randn(1, 3, SIZE, SIZE)
    attr = (model[1].weight[2].view(3, SIZE, SIZE) * x[0]).sum(0).detach().numpy()
    _, corr = sensitivity_n_correlations(model, x, attr, 2, TILE, n_count=5, sets=30)
    np.testing.assert_allclose(corr, 1.0, atol=1e-5)
    # Pixel tiles (tile = 1) too.
    ns, corr1 = sensitivity_n_correlations(model, x, attr, 2, 1, n_count=4, sets=20)
    assert ns[-1] == round(0.8 * SIZE * SIZE)
    np.testing.assert_allclose(corr1, 1.0, atol=1e-5)


def test_drops_are_shared_by_maps_batched_and_reproducible(small_net):
    counting = Counting(small_net)
    x = torch.randn(1, 3, SIZE, SIZE)
    drops = logit_drops(counting, x, 0, TILE, ns=[1, 4], sets=10, seed=3, batch_size=8)
    assert counting.images == 1 + 2 * 10 and counting.calls == 3  # 21 images in batches of 8
    again = logit_drops(small_net, x, 0, TILE, ns=[1, 4], sets=10, seed=3)
    np.testing.assert_allclose(drops.drops, again.drops, rtol=1e-4, atol=1e-6)
    assert np.array_equal(drops.tile_sets(1), again.tile_sets(1)) and drops.tile_sets(1).shape == (10, 4)
    assert all(len(set(row)) == 4 for row in drops.tile_sets(1))  # distinct tiles per set
    # Many maps, no further model calls.
    before = counting.images
    for seed in range(3):
        correlations(drops, np.random.default_rng(seed).random((SIZE, SIZE)))
    assert counting.images == before
    assert np.isnan(correlations(drops, np.ones((SIZE, SIZE)))[0])  # n = 1, flat map: undefined


def test_n_values_pearson_and_table():
    assert n_values(784, 16)[0] == 1 and n_values(784, 16)[-1] == 627
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1) and np.isnan(pearson([1, 1], [1, 2]))
    recs = [
        {"metric": "sensitivity-n", "image": i, "method": "m", "setting": "s", "model": "net", "tile": 8,
         "sets": 100, "pixels": [64, 128], "corr": c}
        for i, c in (("a", [1.0, 0.5]), ("b", [0.5, None]))
    ]
    table = format_table(recs)
    assert "| 64 | 128 |" in table.replace("  ", " ") or ("64" in table and "128" in table)
    assert "0.75" in table and "0.50" in table


def test_occlusion_8_with_the_zero_occluder_is_perfect_at_n_1_on_the_offline_network(offline_model, chelsea_x):
    """Paper §4.3: "Occlusion-8×8 performs perfectly for small n" — with zeros as occluder, as the metric masks.

    At 64 px (64 tiles of 8×8) to keep the 64 occlusion passes quick; the network is the real one.
    """
    import torch.nn.functional as F

    from iba_core.methods import get_method

    x = F.interpolate(chelsea_x, size=(64, 64), mode="bilinear", align_corners=False)
    occlusion = get_method("occlusion_8").with_settings(occluder="zero")
    values = occlusion.attribute(offline_model, x, 285).values
    drops = logit_drops(offline_model.model, x, 285, 8, ns=[1, 4], sets=60, seed=0)
    corr = correlations(drops, values)
    assert corr[0] >= 0.99
    mean_colour = get_method("occlusion_8").attribute(offline_model, x, 285).values
    assert correlations(drops, mean_colour)[0] < corr[0]  # the mean-colour occluder measures something else


def test_the_runner_occludes_with_zeros_for_sensitivity_n(tmp_path, small_net):
    from iba_core.methods import get_method
    from iba_core.image_folders import list_items
    from iba_core.metrics.results import read_records
    from iba_core.metrics.runner import EvalOptions, run_evaluation
    from metric_helpers import StubLoaded, write_images

    items = list_items(write_images(tmp_path / "imgs", 1)[0].parent)
    out = tmp_path / "r.jsonl"
    methods = {"occlusion_8": get_method("occlusion_8")}  # 8 × 8 tiles, like the metric here (TILE)
    run_evaluation("sensitivity-n", StubLoaded(small_net), items, methods, out,
                   EvalOptions(tiles=[TILE], sets=30, n_count=3, progress=False))
    (record,) = read_records(out)
    assert record["n"][0] == 1 and record["corr"][0] == pytest.approx(1.0, abs=1e-4)
