"""On real photos, the tiles the bottleneck marks as informative matter more to the network."""
import pytest
import torch

from iba_core.images import load_sample
from iba_core.per_sample import PerSampleBottleneck
from iba_core.tiles import tile_order
from reference_impl import remove_tiles

TILE = 14  # paper §4.5 uses 8×8 and 14×14 tiles
FRACTION = 0.2


@pytest.mark.parametrize("photo, target", [("chelsea", 285), ("coffee", 967)])
def test_removing_high_bit_tiles_hurts_more_than_low_bit_tiles(offline_model, offline_stats, photo, target):
    x = offline_model.preprocess(load_sample(photo))
    layer = offline_model.spec.default_layer
    res = PerSampleBottleneck.for_network(offline_model, layer, offline_stats).attribute(x, target)
    n = int(FRACTION * (224 // TILE) ** 2)
    most = remove_tiles(x, tile_order(res.heatmap, TILE, True)[:n], TILE)
    least = remove_tiles(x, tile_order(res.heatmap, TILE, False)[:n], TILE)
    with torch.no_grad():
        p = offline_model.model(torch.cat([x, most, least])).softmax(1)[:, target]
    p_orig, p_most, p_least = p.tolist()
    print(f"{photo}: p={p_orig:.3f}, without top-20% tiles {p_most:.3f}, without bottom-20% tiles {p_least:.3f}")
    assert p_most < p_least, (p_orig, p_most, p_least)
