import numpy as np
import pytest
import torch

from iba_core.metrics.degradation import (
    DegradationCurves,
    degradation_curves,
    degradation_score,
    removal_steps,
    summarise,
)
from iba_core.tiles import degrade, tile_order, tile_rank_map
from reference_impl import remove_tiles
from metric_helpers import SIZE, TILE, Counting, OneTileNet, one_tile_image

N_TILES = (SIZE // TILE) ** 2
HOT = 5


def marking_map(tile_index: int = HOT) -> np.ndarray:
    m = np.zeros((SIZE, SIZE))
    r, c = divmod(tile_index, SIZE // TILE)
    m[r * TILE:(r + 1) * TILE, c * TILE:(c + 1) * TILE] = 1.0
    return m


def test_map_marking_the_only_tile_the_model_sees_gets_the_top_area():
    model, x = OneTileNet(HOT), one_tile_image(HOT)
    curves = degradation_curves(model, x, marking_map(), target=0, tile=TILE)
    morf, lerf = curves.scaled()
    # MoRF drops to the floor after the first step, LeRF only at the very end.
    assert morf[0] == pytest.approx(1) and np.allclose(morf[1:], 0)
    assert np.allclose(lerf[:-1], 1) and lerf[-1] == pytest.approx(0)
    assert curves.area() == pytest.approx((N_TILES - 1) / N_TILES)  # the largest area possible
    # The inverse map ranks the tile last: the most negative area.
    assert degradation_curves(model, x, -marking_map(), 0, TILE).area() == pytest.approx(-(N_TILES - 1) / N_TILES)


def test_random_maps_score_about_zero_on_average():
    model, x = OneTileNet(HOT), one_tile_image(HOT)
    rng = np.random.default_rng(0)
    curves = [degradation_curves(model, x, rng.random((SIZE, SIZE)), 0, TILE) for _ in range(64)]
    summary = degradation_score(curves)
    assert abs(summary.area) < 0.15
    assert summary.area < degradation_curves(model, x, marking_map(), 0, TILE).area() - 0.5


def test_batched_images_match_remove_tiles_step_by_step(small_net):
    x = torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    attr = np.random.default_rng(3).random((SIZE, SIZE))
    order = tile_order(attr, TILE, True)
    batch = degrade(x, tile_rank_map(order, TILE, (SIZE, SIZE)).expand(N_TILES + 1, -1, -1), list(range(N_TILES + 1)))
    for k in range(N_TILES + 1):
        assert torch.equal(batch[k], remove_tiles(x, order[:k], TILE)[0])
    # And the curve is the model's target probability on those images.
    curves = degradation_curves(small_net, x, attr, target=1, tile=TILE, batch_size=5)
    with torch.no_grad():
        expected = small_net(batch).softmax(1)[:, 1].double().numpy()
    np.testing.assert_allclose(curves.morf, expected, rtol=1e-4, atol=1e-6)
    lerf_order = tile_order(attr, TILE, False)
    with torch.no_grad():
        lerf = [small_net(remove_tiles(x, lerf_order[:k], TILE)).softmax(1)[0, 1].item() for k in range(N_TILES + 1)]
    np.testing.assert_allclose(curves.lerf, lerf, rtol=1e-4, atol=1e-6)


def test_steps_are_batched_and_endpoints_run_once(small_net):
    counting = Counting(small_net)
    x = torch.randn(1, 3, SIZE, SIZE)
    degradation_curves(counting, x, np.random.default_rng(0).random((SIZE, SIZE)), 0, TILE, batch_size=8)
    assert counting.images == 2 * N_TILES  # 2 shared endpoints + (N − 1) inner steps per direction
    assert counting.calls == 2 * N_TILES // 8


def test_fewer_points_sample_the_same_curve(small_net):
    x = torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(2))
    attr = np.random.default_rng(1).random((SIZE, SIZE))
    full = degradation_curves(small_net, x, attr, 2, TILE)
    coarse = degradation_curves(small_net, x, attr, 2, TILE, points=5)
    assert coarse.removed.tolist() == [0, 4, 8, 12, 16] == removal_steps(16, 5).tolist()
    np.testing.assert_allclose(coarse.morf, full.morf[coarse.removed], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(coarse.lerf, full.lerf[coarse.removed], rtol=1e-4, atol=1e-6)


def test_set_scaling_uses_set_means_and_records_round_trip():
    a = DegradationCurves(2, 2, np.arange(3), np.array([0.8, 0.2, 0.1]), np.array([0.8, 0.7, 0.1]), 0, 0.9, 0.1)
    b = DegradationCurves(2, 2, np.arange(3), np.array([0.6, 0.1, 0.3]), np.array([0.6, 0.5, 0.3]), 0, 0.7, 0.3)
    s = degradation_score([a, b])
    assert (s.t1, s.b) == (pytest.approx(0.8), pytest.approx(0.2))
    # area = mean over images of ∫(lerf − morf) / (t1 − b): (0.5·0.5 + 0.4·0.5)/2 / 0.6
    assert s.area == pytest.approx(((0.5 + 0.4) / 2 * 0.5) / 0.6)
    rec = dict(a.to_record(), metric="degradation", image="a", method="m", setting="s")
    back = DegradationCurves.from_record(rec)
    assert np.allclose(back.morf, a.morf) and back.top1 == a.top1
    # Per-setting t1/b is shared by all methods of that setting.
    recs = [rec, dict(b.to_record(), metric="degradation", image="b", method="m", setting="s"),
            dict(a.to_record(), metric="degradation", image="a", method="other", setting="s")]
    summary = summarise(recs)
    assert summary[("other", "s")].t1 == pytest.approx(0.8) and summary[("m", "s")].area == pytest.approx(s.area)


def test_scoring_model_in_bf16_keeps_the_logits(offline_model, chelsea_x):
    """The metric's forward passes may run in bf16 (precision auto); logits stay close to fp32."""
    from iba_core.metrics.common import scoring_model
    from iba_core.precision import unsupported

    if unsupported("bf16", "cpu"):
        pytest.skip(f"bf16 cannot run here: {unsupported('bf16', 'cpu')}")
    with torch.no_grad():
        fp32 = scoring_model(offline_model, "fp32")(chelsea_x)
        bf16 = scoring_model(offline_model, "bf16")(chelsea_x)
    assert bf16.dtype == torch.float32 and int(bf16.argmax()) == int(fp32.argmax()) == 285
    assert float((bf16 - fp32).abs().max()) < 0.05 * float(fp32.abs().max())


def test_the_default_tile_divides_the_crop():
    """The form offers first the paper's largest tile that fits: 14 at 224 px, 8 where 14 does not divide the crop
    (256 px Swin V2, 384 px ViTs, 32 px test models); a crop neither fits keeps the largest (its run says why)."""
    from iba_core.metrics.degradation import default_tile

    assert default_tile(224, 224) == 14
    assert default_tile(256, 256) == 8 and default_tile(384, 384) == 8 and default_tile(32, 32) == 8
    assert default_tile(300, 300) == 14
