"""Pointing game (TorchRay's rule), energy-based pointing and InputIBA's effective heat ratio, by hand."""
import math

import numpy as np
import pytest
import torch

from iba_core.errors import UserError
from iba_core.metrics.pointing import (
    POINTING_TOLERANCE,
    effective_heat_ratio,
    energy_pointing,
    format_table,
    pointing_hit,
    pointing_point,
    pointing_scores,
)

N = 64


def box(r0, r1, c0, c1, size=N) -> np.ndarray:
    mask = np.zeros((size, size), dtype=bool)
    mask[r0:r1, c0:c1] = True
    return mask


def peak(row, col, size=N) -> np.ndarray:
    values = np.zeros((size, size))
    values[row, col] = 1.0
    return values


def torchray_rule(values: np.ndarray, mask: np.ndarray, tolerance: int) -> bool:
    """TorchRay's pointing game as published: the point is torch.argmax of the flattened map as (u, v) =
    (column, row); a hit when mask & ((row − v)² + (col − u)² < tolerance²) has any pixel."""
    saliency = torch.from_numpy(values)[None, None]
    w = saliency.shape[3]
    flat = torch.argmax(saliency.view(1, -1), dim=1)
    u, v = int(flat % w), int(flat // w)
    dv, du = torch.meshgrid((torch.arange(mask.shape[0], dtype=torch.float32) - v) ** 2,
                            (torch.arange(mask.shape[1], dtype=torch.float32) - u) ** 2, indexing="ij")
    return bool((torch.from_numpy(mask) & ((dv + du) < tolerance ** 2)).any())


def test_a_peak_inside_the_box_hits_and_one_beyond_the_tolerance_misses():
    mask = box(20, 30, 20, 30)  # rows and columns 20 … 29
    assert pointing_hit(peak(25, 25), mask)
    assert not pointing_hit(peak(25, 29 + 16), mask)  # 16 px right of the box
    assert not pointing_hit(peak(5, 5), mask)
    assert pointing_hit(peak(25, 29 + 10), mask)  # within 15 px of the box: a hit
    assert pointing_hit(peak(29 + 14, 25), mask)  # 14 px below
    assert not pointing_hit(peak(29 + 15, 25), mask)  # exactly 15 px: TorchRay's < is strict
    assert pointing_hit(peak(29 + 15, 25), mask, tolerance=16)
    # Diagonal: 11² + 11² = 242 > 225 misses, 10² + 10² = 200 hits.
    assert not pointing_hit(peak(29 + 11, 29 + 11), mask) and pointing_hit(peak(29 + 10, 29 + 10), mask)
    assert not pointing_hit(peak(29 + 1, 25), mask, tolerance=0)  # tolerance 0: nothing is accepted
    assert POINTING_TOLERANCE == 15


def test_ties_of_the_maximum_take_the_first_in_row_major_order():
    mask = box(40, 50, 40, 50)
    values = np.zeros((N, N))
    values[2, 60] = values[45, 45] = 1.0  # equal maxima: the one outside comes first in row-major order
    assert pointing_point(values) == (2, 60) and not pointing_hit(values, mask)
    values[2, 60] = 0.999
    assert pointing_hit(values, mask)
    values = np.full((N, N), np.nan)
    values[45, 45] = -3.0  # NaN never wins
    assert pointing_point(values) == (45, 45)


def test_pointing_agrees_with_torchray_rule_on_random_maps_and_boxes():
    rng = np.random.default_rng(0)
    hits = 0
    for i in range(300):
        values = rng.random((N, N)).round(1)  # rounded: many ties of the maximum
        r0, c0 = rng.integers(0, N - 4, size=2)
        r1, c1 = r0 + rng.integers(1, 20), c0 + rng.integers(1, 20)
        mask = box(r0, r1, c0, c1)
        if i % 3 == 0:
            mask |= box(*sorted(rng.integers(0, N, size=2)), *sorted(rng.integers(0, N, size=2)))
        tolerance = int(rng.choice([0, 1, 5, 15, 30]))
        expected = torchray_rule(values, mask, tolerance)
        assert pointing_hit(values, mask, tolerance) == expected, i
        hits += expected
    assert 30 < hits < 270  # both outcomes exercised


def test_energy_pointing_by_hand():
    values = np.array([[4.0, -2.0, 0.0, 1.0],
                       [2.0, -5.0, 3.0, 0.0],
                       [0.0, 0.0, 0.0, 0.0],
                       [0.0, 0.0, 0.0, 2.0]])
    mask = np.zeros((4, 4), dtype=bool)
    mask[:2, :2] = True
    # positive mass 4 + 1 + 2 + 3 + 2 = 12; inside the box 4 + 2 = 6 (the −2 and −5 count as 0)
    assert energy_pointing(values, mask) == pytest.approx(0.5)
    assert energy_pointing(values, ~mask) == pytest.approx(0.5)
    assert energy_pointing(np.where(mask, values, 0.0), mask) == pytest.approx(1.0)
    assert math.isnan(energy_pointing(-np.abs(values), mask))  # no positive mass: undefined


def test_effective_heat_ratio_by_hand():
    mask = np.zeros((1, 3), dtype=bool)
    mask[0, 2] = True
    # Heat [0, 0.5, 1]: the pixels counted are 0.5 and 1. At q = 0 the threshold is 0.5: both selected,
    # in-box heat 1 over 2 pixels = 0.5. For q = 0.1 … 1 the threshold lies in (0.5, 0.99]: only the 1 is
    # selected, ratio 1. Trapezoid: 0.1 · (0.5 + 1) / 2 + 0.9 · 1 = 0.975.
    assert effective_heat_ratio(np.array([[0.0, 0.5, 1.0]]), mask) == pytest.approx(0.975)
    assert effective_heat_ratio(np.array([[-2.0, 0.0, 2.0]]), mask) == pytest.approx(0.975)  # scaled to [0, 1]
    # All heat at 1, half of it in the box: every ratio 0.5.
    assert effective_heat_ratio(np.array([[1.0, 0.0, 1.0]]), mask) == pytest.approx(0.5)
    assert math.isnan(effective_heat_ratio(np.ones((1, 3)), mask))


def test_scores_of_one_map_and_bad_input():
    mask = box(10, 20, 10, 20)
    scores = pointing_scores(peak(15, 15), mask)
    assert scores == {"pointing_hit": 1.0, "energy_pointing": 1.0, "ehr": pytest.approx(1.0)}
    with pytest.raises(UserError, match="box mask is empty"):
        pointing_scores(peak(15, 15), np.zeros((N, N), dtype=bool))
    with pytest.raises(ValueError, match="differ in shape"):
        pointing_hit(peak(1, 1, 8), mask)


def test_table_gives_hit_rate_energy_and_images_per_method():
    def record(method, image, hit, energy, ehr=None, **extra):
        return {"metric": "pointing", "image": image, "method": method, "setting": "m|tolerance=15",
                "method_name": method.title(), "model": "m", "tolerance": 15, "pointing_hit": hit,
                "energy_pointing": energy, "ehr": ehr, **extra}

    records = [record("iba", "a", 1.0, 0.8, 0.6, box_share=0.1), record("iba", "b", 0.0, 0.4, 0.2, box_share=0.3),
               record("random", "a", 0.0, 0.1, box_share=0.1), record("*", "c", None, None, skipped="no annotation")]
    text = format_table(records)
    iba = next(line for line in text.splitlines() if line.startswith("| Iba"))
    assert [c.strip() for c in iba.strip("|").split("|")] == ["Iba", "0.500", "0.600", "0.400", "0.200", "2"]
    assert "closer than 15 px" in text and "1 image(s) skipped" in text
    assert "random map hits often" not in text  # no box covers more than a third of its crop
    large = format_table(records + [record("iba", "d", 1.0, 0.9, 0.9, box_share=0.8)])
    assert "1 image(s) with boxes covering more than 33% of the crop" in large
