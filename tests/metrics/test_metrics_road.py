"""ROAD (Rong et al. 2022): the noisy linear imputation, the curves, and agreement with pytorch-grad-cam."""
import numpy as np
import pytest
import torch
from torch import nn

from iba_core.errors import UserError
from iba_core.metrics.common import pixel_order
from iba_core.metrics.road import (
    ROAD_REMOVED, RoadCurves, check_noise, check_removed, format_table, noisy_linear_impute,
    removed_count, road_curves,
)
from metric_helpers import Counting, SmallConvNet

SIDE = 20  # 400 pixels: every ROAD percentage is a whole number of pixels, under both conventions


class PooledNet(nn.Module):
    """A small non-linear conv net of any input size (pooled), 4 classes, fixed seed."""

    def __init__(self, seed: int = 1):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 4)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.4)
        self.eval()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.conv1(x))
        h = torch.tanh(self.conv2(h))
        return self.fc(nn.functional.adaptive_avg_pool2d(h, 4).flatten(1))


def random_mask(shape, share, seed=0):
    return np.random.default_rng(seed).random(shape) < share


# --------------------------------------------------------------------------------------------
# The imputation.


def test_a_constant_image_stays_constant_border_pixels_included():
    x = torch.full((3, 16, 12), 0.0, dtype=torch.float64)
    x[0], x[1], x[2] = 1.5, -2.0, 0.25
    removed = random_mask((16, 12), 0.7)
    removed[0, 0] = removed[-1, -1] = removed[0, 5] = True  # corners and an edge: renormalised weights
    out = noisy_linear_impute(x, removed, noise=0.0)
    assert torch.allclose(out, x, rtol=0, atol=1e-12)


def test_a_linear_ramp_is_recovered_at_interior_pixels():
    f64 = torch.float64  # a ramp exact in float64 (float32 rounding is not linear)
    rows, cols = torch.meshgrid(torch.arange(18.0, dtype=f64), torch.arange(15.0, dtype=f64), indexing="ij")
    ramp = torch.stack([0.3 * rows - 0.7 * cols + 2, -rows + 0.1 * cols, 0.5 * cols])  # (3, H, W)
    removed = np.zeros((18, 15), dtype=bool)
    removed[1:-1, 1:-1] = random_mask((16, 13), 0.8, seed=3)  # never a border pixel
    removed[5:12, 4:10] = True  # a large hole: pixels imputed only from imputed neighbours
    out = noisy_linear_impute(ramp.double(), removed, noise=0.0)
    assert torch.allclose(out, ramp.double(), rtol=0, atol=1e-9)


def test_kept_pixels_are_untouched_and_a_removed_one_is_its_neighbours_weighted_mean():
    x = torch.rand(2, 7, 9, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    removed = np.zeros((7, 9), dtype=bool)
    removed[3, 4] = removed[0, 0] = True  # one interior pixel, one corner (only its 3 neighbours count)
    out = noisy_linear_impute(x, removed, noise=0.0)
    assert torch.equal(out[:, ~torch.from_numpy(removed)], x[:, ~torch.from_numpy(removed)])
    interior = (x[:, 2, 4] + x[:, 4, 4] + x[:, 3, 3] + x[:, 3, 5]) / 6 \
        + (x[:, 2, 3] + x[:, 2, 5] + x[:, 4, 3] + x[:, 4, 5]) / 12
    corner = (x[:, 0, 1] / 6 + x[:, 1, 0] / 6 + x[:, 1, 1] / 12) / (1 / 6 + 1 / 6 + 1 / 12)
    assert torch.allclose(out[:, 3, 4], interior, rtol=1e-12) and torch.allclose(out[:, 0, 0], corner, rtol=1e-12)


@pytest.mark.parametrize("share", [0.1, 0.5, 0.9])
def test_imputation_agrees_with_pytorch_grad_cam(share):
    from pytorch_grad_cam.metrics.road import NoisyLinearImputer

    x = torch.randn(3, 23, 17, generator=torch.Generator().manual_seed(1))
    removed = random_mask((23, 17), share, seed=int(share * 10))
    ours = noisy_linear_impute(x, removed, noise=0.0)
    # pytorch-grad-cam's mask is 1 where a pixel is kept
    theirs = NoisyLinearImputer(noise=0.0)(x, torch.from_numpy((~removed).astype(np.float32)))
    assert torch.allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_noise_lands_on_the_imputed_pixels_only_with_the_asked_sigma_and_seed():
    x = torch.zeros(1, 3, 64, 64)
    removed = random_mask((64, 64), 0.5, seed=2)
    a = noisy_linear_impute(x, removed, noise=0.01, generator=torch.Generator().manual_seed(5))
    b = noisy_linear_impute(x, removed, noise=0.01, generator=torch.Generator().manual_seed(5))
    c = noisy_linear_impute(x, removed, noise=0.01, generator=torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    mask = torch.from_numpy(removed)
    assert torch.all(a[0][:, ~mask] == 0)
    assert a[0][:, mask].std().item() == pytest.approx(0.01, rel=0.05)  # ~6,000 draws


def test_imputation_keeps_shape_dtype_and_device():
    x = torch.rand(1, 2, 8, 8, dtype=torch.float64)
    out = noisy_linear_impute(x, torch.from_numpy(random_mask((8, 8), 0.3)), noise=0.0)
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    assert noisy_linear_impute(x[0], np.zeros((8, 8), bool)).shape == (2, 8, 8)


def test_imputation_refuses_what_it_cannot_do():
    x = torch.rand(3, 8, 8)
    with pytest.raises(UserError, match="every pixel removed"):
        noisy_linear_impute(x, np.ones((8, 8), bool))
    with pytest.raises(ValueError, match="mask is shaped"):
        noisy_linear_impute(x, np.zeros((8, 7), bool))


# --------------------------------------------------------------------------------------------
# Ranking, counts, settings.


def test_ties_are_ordered_by_the_seed_and_values_first():
    values = np.array([[0.0, 1.0], [1.0, 0.0]] * 8)  # (16, 2), only ties
    orders = {tuple(pixel_order(values, seed)) for seed in range(6)}
    assert len(orders) > 1
    assert tuple(pixel_order(values, 3)) == tuple(pixel_order(values, 3))
    for order in orders:
        assert set(order[:16]) == set(np.flatnonzero(values.ravel() == 1.0))


def test_counts_and_settings():
    assert [removed_count(p, 400) for p in ROAD_REMOVED] == [40, 80, 120, 160, 200, 240, 280, 320, 360]
    assert removed_count(90, 4) == 3  # at least one pixel stays to impute from
    assert check_removed([10, 50.5]) == (10.0, 50.5)
    for bad in ([0], [100], [-5], [20, 150], []):
        with pytest.raises(UserError):
            check_removed(bad)
    with pytest.raises(UserError, match="noise"):
        check_noise(-0.1)
    with pytest.raises(UserError, match="from 0 to 100"):  # 1e308 overflowed: every ROAD score empty, exit 0
        check_noise(1e308)


# --------------------------------------------------------------------------------------------
# The curves.


def image_and_map(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 3, SIDE, SIDE, generator=g)
    # distinct values (no ties, also after pytorch-grad-cam's 1 − map), smooth enough to remove regions
    rng = np.random.default_rng(seed)
    rank = rng.permutation(SIDE * SIDE).reshape(SIDE, SIDE)
    smooth = np.add.outer(np.arange(SIDE), np.arange(SIDE)) * SIDE * SIDE
    order = np.argsort(np.argsort((smooth + rank).ravel())).reshape(SIDE, SIDE)
    return x, (order / (SIDE * SIDE)).astype(np.float32)


@pytest.mark.parametrize("removed", [ROAD_REMOVED, (20, 70)])  # (20, 70): a wrong percentile reading fails
def test_road_agrees_with_pytorch_grad_cam_on_a_tiny_network(monkeypatch, removed):
    from pytorch_grad_cam.metrics.road import (
        ROADCombined, ROADLeastRelevantFirstAverage, ROADMostRelevantFirstAverage,
    )
    from pytorch_grad_cam.utils.model_targets import ClassifierOutputSoftmaxTarget

    import pytorch_grad_cam.metrics.road as gradcam_road

    model = PooledNet()
    images, maps = zip(*(image_and_map(s) for s in (0, 1)))
    x, cams = torch.cat(images), np.stack(maps)
    targets_idx = [int(t) for t in model(x).argmax(1)]
    targets = [ClassifierOutputSoftmaxTarget(t) for t in targets_idx]
    kept = [100 - p for p in removed]  # pytorch-grad-cam's percentile: the share kept
    # noise 0 on their side: their metrics build the imputer inside, with its default σ = 0.01
    init = gradcam_road.NoisyLinearImputer.__init__
    monkeypatch.setattr(init, "__defaults__", (0.0,) + init.__defaults__[1:])
    morf_theirs = ROADMostRelevantFirstAverage(kept)(x, cams, targets, model)
    lerf_theirs = ROADLeastRelevantFirstAverage(kept)(x, cams, targets, model)
    combined_theirs = ROADCombined(kept)(x, cams, targets, model)
    for i in range(2):
        ours = road_curves(model, x[i:i + 1], cams[i], targets_idx[i], removed, noise=0.0)
        # their MoRF / LeRF scores are differences to p(target) of the original image
        assert ours.morf_score - ours.p_original == pytest.approx(float(morf_theirs[i]), rel=1e-4, abs=1e-6)
        assert ours.lerf_score - ours.p_original == pytest.approx(float(lerf_theirs[i]), rel=1e-4, abs=1e-6)
        assert ours.combined == pytest.approx(float(combined_theirs[i]), rel=1e-4, abs=1e-6)
    assert len({round(float(v), 6) for v in morf_theirs}) == 2  # two different images, two different scores


def test_curves_do_not_depend_on_the_batch_size():
    model = Counting(SmallConvNet())
    x = torch.rand(1, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    values = np.random.default_rng(4).random((32, 32))
    one = road_curves(model, x, values, 1, batch_size=1, seed=7)
    assert model.calls == 1 + 2 * len(ROAD_REMOVED)
    model.calls = 0
    many = road_curves(model, x, values, 1, batch_size=64, seed=7)
    assert model.calls == 1
    np.testing.assert_allclose(one.morf, many.morf, rtol=1e-4)
    np.testing.assert_allclose(one.lerf, many.lerf, rtol=1e-4)
    other = road_curves(model, x, values, 1, seed=8)  # other noise
    assert not np.allclose(other.morf, many.morf, rtol=1e-6, atol=0)


def test_curves_measure_what_the_map_ranks():
    """A network that reads one region: a map of that region drops MoRF fast, LeRF keeps it."""

    class CornerNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(1))

        def forward(self, x):
            a = 4 * self.w * x[:, :, :8, :8].mean(dim=(1, 2, 3))  # the top-left corner's brightness
            return torch.stack([a, -a], dim=1)

    x = torch.zeros(1, 3, 32, 32)
    x[:, :, :8, :8] = 1.0  # a bright corner, p(class 0) = σ(8) on the image itself
    good = np.zeros((32, 32))
    good[:8, :8] = 1 + np.random.default_rng(0).random((8, 8))
    curves = road_curves(CornerNet(), x, good, 0, removed=[10, 50], noise=0.0)
    assert curves.p_original == pytest.approx(torch.sigmoid(torch.tensor(8.0)).item())
    assert curves.morf[1] < 0.6 < curves.lerf[1]  # the corner imputed from dark neighbours vs kept
    assert curves.combined > 0.1
    reverse = road_curves(CornerNet(), x, -good, 0, removed=[10, 50], noise=0.0)
    assert reverse.combined < 0


def test_progress_is_reported_per_imputed_image():
    calls = []
    road_curves(SmallConvNet(), torch.rand(1, 3, 32, 32), np.random.default_rng(0).random((32, 32)), 0,
                removed=[25, 75], progress=lambda done, total, label: calls.append((done, total, label)))
    assert [c[:2] for c in calls] == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert calls[0][2] == "MoRF 25 % removed" and calls[-1][2] == "LeRF 75 % removed"


def test_record_round_trip_scores_and_table():
    curves = RoadCurves(np.array([10.0, 50.0]), np.array([0.4, 0.2]), np.array([0.8, 0.6]), 3, p_original=0.9)
    assert (curves.morf_score, curves.lerf_score) == pytest.approx((0.3, 0.7))
    assert curves.combined == pytest.approx(0.2)  # (0.7 − 0.3) / 2
    record = curves.to_record()
    back = RoadCurves.from_record(record)
    assert back.combined == pytest.approx(curves.combined) and back.target == 3 and back.p_original == 0.9
    rows = [dict(record, metric="road", image=f"i{i}", method=m, method_name=m.title(), setting="s", model="net")
            for i in range(2) for m in ("saliency", "random")]
    rows[-1] = dict(rows[-1], morf=[0.6, 0.6], lerf=[0.6, 0.6])  # random on image 2: no signal
    text = format_table(rows)
    assert "| Saliency" in text and "MoRF (lower is better)" in text and "removed 10, 50 %" in text
    line = next(l for l in text.splitlines() if l.startswith("| Random"))
    assert [c.strip() for c in line.strip("|").split("|")][1:] == ["0.450", "0.650", "0.100", "2"]
