"""Insertion and deletion (RISE): curves by hand on a linear network, the area, protocols, batching, records."""
import json
import math

import numpy as np
import pytest
import torch
from torch import nn

from iba_core.errors import UserError
from iba_core.jsonable import jsonable
from iba_core.metrics.insertion_deletion import (
    DELETION,
    INSERTION,
    PROTOCOLS,
    InsertionDeletionCurves,
    PixelProtocol,
    auc,
    format_table,
    insertion_deletion,
    protocol_from,
)
from metric_helpers import SIZE, Counting

H = W = 8  # 64 pixels: small enough to follow every step by hand


class LinearEvidence(nn.Module):
    """Two classes: logit 0 = Σ w·x over channels and pixels, logit 1 = 0 (so p₀ = σ(Σ w·x))."""

    def __init__(self, w: torch.Tensor):
        super().__init__()
        self.w = nn.Parameter(w.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = (self.w * x).sum(dim=(1, 2, 3))
        return torch.stack([z, torch.zeros_like(z)], dim=1)


def linear_case(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(1, 3, H, W, generator=g, dtype=torch.float64).float() * 0.3
    x = torch.randn(1, 3, H, W, generator=g).float()
    evidence = (w * x)[0].sum(0).double().numpy()  # the exact per-pixel evidence of the logit
    return LinearEvidence(w), x, evidence


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def gaussian_blur_numpy(img: np.ndarray, kernel: int, sigma: float) -> np.ndarray:
    """A sampled Gaussian truncated to kernel × kernel, normalised, reflect padding (per channel)."""
    r = kernel // 2
    t = np.arange(-r, r + 1, dtype=np.float64)
    k1 = np.exp(-t ** 2 / (2 * sigma ** 2))
    k1 /= k1.sum()
    padded = np.pad(img, ((0, 0), (r, r), (r, r)), mode="reflect")
    rows = sum(k1[i] * padded[:, i:i + img.shape[1], :] for i in range(kernel))
    return sum(k1[j] * rows[:, :, j:j + img.shape[2]] for j in range(kernel))


def test_deletion_curve_of_the_exact_evidence_matches_the_hand_computed_one():
    model, x, evidence = linear_case()
    step = 5  # 64 pixels: 12 steps of 5 and a last one of 4
    curves = insertion_deletion(model, x, evidence, 0, PixelProtocol("test", step, "zeros", 3, 1.0),
                                which=(DELETION,))
    # By hand: deleting a pixel to 0 removes exactly its evidence from the logit.
    order = np.argsort(-evidence.ravel(), kind="stable")  # the evidence has no ties
    removed = np.concatenate([[0.0], np.cumsum(evidence.ravel()[order])])
    counts = [min(i * step, H * W) for i in range(math.ceil(H * W / step) + 1)]
    expected = sigmoid(evidence.sum() - removed[counts])
    assert counts[-2:] == [60, 64] and len(curves.deletion) == 14 and curves.insertion is None
    np.testing.assert_allclose(curves.fraction, np.asarray(counts) / 64)
    np.testing.assert_allclose(curves.deletion, expected, rtol=1e-4)
    assert curves.deletion[-1] == pytest.approx(0.5)  # everything deleted: logit 0
    assert curves.deletion_auc == pytest.approx(auc(expected), rel=1e-4)
    assert math.isnan(curves.insertion_auc)
    # The evidence ranks the pixels best for deletion: it beats its own reverse and a random map.
    worst = insertion_deletion(model, x, -evidence, 0, PixelProtocol("test", step, "zeros", 3, 1.0),
                               which=(DELETION,))
    rand = insertion_deletion(model, x, np.random.default_rng(1).random((H, W)), 0,
                              PixelProtocol("test", step, "zeros", 3, 1.0), which=(DELETION,))
    assert curves.deletion_auc < rand.deletion_auc < worst.deletion_auc


def test_insertion_starts_from_the_blur_computed_by_hand():
    model, x, evidence = linear_case(2)
    protocol = PixelProtocol("test", 7, "blur", 3, 1.0)
    curves = insertion_deletion(model, x, evidence, 0, protocol)
    blur = gaussian_blur_numpy(x[0].double().numpy(), 3, 1.0)
    w = model.w.detach()[0].double().numpy()
    blur_evidence = (w * blur).sum(0).ravel()
    order = np.argsort(-evidence.ravel(), kind="stable")
    counts = [min(i * 7, 64) for i in range(math.ceil(64 / 7) + 1)]
    inserted = np.array([evidence.ravel()[order[:k]].sum() + np.delete(blur_evidence, order[:k]).sum()
                         for k in counts])
    np.testing.assert_allclose(curves.insertion, sigmoid(inserted), rtol=1e-4)
    # Deletion to the blur ends where insertion begins, and starts where insertion ends: p(x).
    assert curves.deletion[-1] == pytest.approx(curves.insertion[0], rel=1e-5)
    assert curves.deletion[0] == pytest.approx(curves.insertion[-1], rel=1e-5)
    assert curves.insertion[-1] == pytest.approx(sigmoid(evidence.sum()), rel=1e-4)


def test_auc_of_known_curves_by_hand():
    assert auc([0.0, 0.5, 1.0]) == pytest.approx(0.5)
    assert auc([1.0, 1.0, 1.0, 1.0]) == pytest.approx(1.0)
    # (0.2 + 0.4 + 0.9 + 0.3 − 0.1 − 0.15) / 3
    assert auc(np.array([0.2, 0.4, 0.9, 0.3])) == pytest.approx(1.55 / 3)
    curve = np.random.default_rng(0).random(225)
    assert auc(curve) == pytest.approx(np.trapezoid(curve, np.linspace(0, 1, 225)))
    assert math.isnan(auc([0.3]))


def test_batch_size_one_and_sixty_four_give_the_same_curves(small_net):
    x = torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(4))
    values = np.random.default_rng(5).random((SIZE, SIZE))
    protocol = PixelProtocol("test", 37, "zeros", 5, 2.0)  # 1024 pixels: 28 steps, 29 points per curve
    counted = Counting(small_net)
    seen: list[tuple[int, int, str]] = []
    one = insertion_deletion(counted, x, values, 2, protocol, batch_size=1)
    assert counted.calls == counted.images == 2 * 29
    counted.calls = counted.images = 0
    many = insertion_deletion(counted, x, values, 2, protocol, batch_size=64,
                              progress=lambda d, t, label: seen.append((d, t, label)))
    assert counted.calls == 1 and counted.images == 58
    np.testing.assert_allclose(one.insertion, many.insertion, rtol=1e-4)
    np.testing.assert_allclose(one.deletion, many.deletion, rtol=1e-4)
    # Seven at a time: ⌈58 / 7⌉ passes, progress after each, ending at the total.
    counted.calls = 0
    seen.clear()
    seven = insertion_deletion(counted, x, values, 2, protocol, batch_size=7,
                               progress=lambda d, t, label: seen.append((d, t, label)))
    assert counted.calls == 9 and [d for d, _, _ in seen] == [7, 14, 21, 28, 35, 42, 49, 56, 58]
    assert {t for _, t, _ in seen} == {58} and seen[0][2] == INSERTION and seen[-1][2] == DELETION
    np.testing.assert_allclose(seven.deletion, many.deletion, rtol=1e-4)


def test_ties_are_broken_by_the_seed_not_by_position(small_net):
    x = torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(6))
    flat = np.zeros((SIZE, SIZE))
    protocol = PixelProtocol("test", 64, "zeros", 3, 1.0)
    a = insertion_deletion(small_net, x, flat, 0, protocol, which=(DELETION,), seed=1)
    b = insertion_deletion(small_net, x, flat, 0, protocol, which=(DELETION,), seed=1)
    c = insertion_deletion(small_net, x, flat, 0, protocol, which=(DELETION,), seed=2)
    np.testing.assert_array_equal(a.deletion, b.deletion)
    assert not np.allclose(a.deletion[1:-1], c.deletion[1:-1])
    # Not row-major: the first step of a flat map is not the top rows.
    top_rows = np.zeros((SIZE, SIZE))
    top_rows[:2] = 1.0
    rows_first = insertion_deletion(small_net, x, top_rows, 0, protocol, which=(DELETION,), seed=1)
    assert not np.isclose(rows_first.deletion[1], a.deletion[1], rtol=1e-6)


def test_heads_score_their_own_probability():
    model, x, evidence = linear_case(3)
    protocol = PixelProtocol("test", 16, "zeros", 3, 1.0)
    soft = insertion_deletion(model, x, evidence, 0, protocol, which=(DELETION,))
    sig = insertion_deletion(model, x, evidence, 0, protocol, which=(DELETION,), head="sigmoid")
    # softmax over [z, 0] is σ(z), and the sigmoid head's label 0 is σ(z) too; label 1 under sigmoid is σ(0).
    np.testing.assert_allclose(soft.deletion, sig.deletion, rtol=1e-6)
    assert np.allclose(insertion_deletion(model, x, evidence, 1, protocol, which=(DELETION,),
                                          head="sigmoid").deletion, 0.5)

    class OneLogit(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)[:, :1]

    negative = insertion_deletion(OneLogit(model), x, evidence, 0, protocol, which=(DELETION,), head="binary")
    np.testing.assert_allclose(negative.deletion, 1 - soft.deletion, rtol=1e-4)


def test_protocols_are_named_and_checked():
    assert PROTOCOLS["rise"] == PixelProtocol() and PROTOCOLS["rise"].identity() == "step=224|del=zeros|blur=11/5"
    coiba = PROTOCOLS["coiba"]
    assert (coiba.step, coiba.deletion_baseline, coiba.blur_kernel, coiba.blur_sigma) == (1792, "blur", 51, 50.0)
    assert "Protocol CoIBA: 1,792 pixels a step" in coiba.describe() and "51 × 51" in coiba.describe()
    assert protocol_from("rise") == PROTOCOLS["rise"]
    changed = protocol_from("rise", step=500)
    assert changed.name == "rise, modified" and changed.identity().startswith("step=500|")
    assert protocol_from("coiba", step=1792).name == "coiba"
    for bad in (dict(step=0), dict(deletion_baseline="noise"), dict(blur_kernel=10), dict(blur_sigma=0.0),
                dict(blur_sigma=float("nan"))):
        with pytest.raises(UserError):
            PixelProtocol(**bad)
    with pytest.raises(UserError, match="choose one of: rise, coiba"):
        protocol_from("lime")
    # no silent numbers: a σ that overflowed (every score empty, exit 0) and a 30-digit step (an OverflowError)
    with pytest.raises(UserError, match="between 0.1 and 1000 pixels"):
        protocol_from("rise", blur_sigma=1e-200)
    with pytest.raises(UserError, match="between 0.1 and 1000 pixels"):
        protocol_from("rise", blur_sigma=1e6)
    with pytest.raises(UserError, match="at most 100,000,000 pixels a step"):
        protocol_from("rise", step=123456789012345678901234567890)
    model, x, evidence = linear_case()
    with pytest.raises(UserError, match="larger than"):  # a 51 × 51 blur on an 8 × 8 image
        insertion_deletion(model, x, evidence, 0, PROTOCOLS["coiba"])
    with pytest.raises(UserError):
        insertion_deletion(model, x, evidence, 0, PixelProtocol("t", 8, "zeros", 3, 1.0), which=("road",))


def test_records_round_trip_through_json_and_tabulate():
    model, x, evidence = linear_case()
    protocol = PixelProtocol("test", 9, "zeros", 3, 1.0)
    curves = insertion_deletion(model, x, evidence, 0, protocol)
    back = InsertionDeletionCurves.from_record(json.loads(json.dumps(jsonable(curves.to_record()))))
    assert back.protocol == protocol and back.target == 0
    np.testing.assert_allclose(back.insertion, curves.insertion, atol=1e-7)
    assert back.deletion_auc == pytest.approx(curves.deletion_auc, abs=1e-6)
    only_deletion = insertion_deletion(model, x, evidence, 0, protocol, which=(DELETION,)).to_record()
    assert only_deletion["insertion"] is None and jsonable(only_deletion)["insertion_auc"] is None

    def record(method, image, c, metric):
        r = {k: v for k, v in c.to_record().items() if k != (DELETION if metric == INSERTION else INSERTION)}
        return jsonable({"metric": metric, "image": image, "method": method, "setting": "m|" + protocol.identity(),
                         "method_name": method.title(), "model": "m", **r})

    rand = insertion_deletion(model, x, np.random.default_rng(0).random((H, W)), 0, protocol)
    records = [record("evidence", "a", curves, DELETION), record("random", "a", rand, DELETION),
               record("evidence", "b", curves, DELETION)]
    text = format_table(records)
    assert "deletion AUC (lower is better)" in text and "insertion AUC" not in text
    assert f"{curves.deletion_auc:.3f}" in text and f"{rand.deletion_auc:.3f}" in text
    assert protocol.describe() in text
    row = next(line for line in text.splitlines() if line.startswith("| Evidence"))
    assert row.rstrip(" |").endswith("2")  # two images
