"""What stands out across a run (iba_core.runs.highlights) on small hand-built tables: the "needs very few bits"
flag against the run's upper quartile, where a class mean concentrates, flagged clusters of every class, outliers
by distance to the class mean."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from iba_core.runs.highlights import (BITS_UNIT, FEW_BITS_FACTOR, FLAT_CONCENTRATION, _cluster_highlight,
                                      concentration_region, few_bits_mask, few_bits_reference, mass_thumbnails,
                                      run_highlights)
from iba_core.runs.measures import THUMBNAIL

UNITS = {"iba": BITS_UNIT, "grad": "gradient"}


def bits_table(bits: list[float], method: str = "iba", error_at: int | None = None) -> pd.DataFrame:
    n = len(bits)
    return pd.DataFrame({"image": [f"i{k}.png" for k in range(n)], "method": [method] * n,
                         "total_bits": np.asarray(bits, dtype=float),
                         "error": [("unreadable" if k == error_at else None) for k in range(n)]})


def test_the_watermark_case_is_flagged_and_nothing_else():
    # the walkthrough's numbers: stamped images near 28 bits, clean ones near 6,733
    stamped, clean = [25.0, 28.0, 31.0, 27.0], [6733.0, 5100.0, 8200.0, 7000.0]
    table = bits_table(stamped + clean)
    assert few_bits_mask(table, UNITS).tolist() == [True] * 4 + [False] * 4


def test_the_flag_holds_while_fewer_than_three_quarters_carry_the_shortcut():
    # 5 of 8 stamped: the median lies inside the stamped group, the upper quartile still with the clean images
    table = bits_table([28.0] * 5 + [6733.0] * 3)
    assert few_bits_mask(table, UNITS).tolist() == [True] * 5 + [False] * 3
    assert few_bits_reference(table["total_bits"].to_numpy()) == pytest.approx(6733.0, rel=1e-6)


def test_an_ordinary_spread_of_bits_flags_nothing():
    # a factor 8 between the smallest and the largest total: no image a decade below the upper quartile
    table = bits_table([100.0, 150.0, 200.0, 300.0, 400.0, 600.0, 800.0])
    assert not few_bits_mask(table, UNITS).any()


def test_the_flag_is_relative_to_its_own_method_and_skips_errors_and_other_units():
    iba = bits_table([28.0, 28.0, 6733.0, 6733.0, 6733.0, 6733.0], error_at=0)
    grad = bits_table([0.001, 5.0, 5.0, 5.0, 5.0, 5.0], method="grad")  # not in bits: never flagged
    table = pd.concat([iba, grad], ignore_index=True)
    flags = few_bits_mask(table, UNITS)
    assert flags.tolist() == [False, True] + [False] * 4 + [False] * 6  # the error row has no result


def test_too_few_maps_flag_nothing():
    assert not few_bits_mask(bits_table([1.0, 1000.0, 1000.0]), UNITS).any()
    assert few_bits_reference(np.array([np.nan, 0.0, 5.0])) is None


def test_the_threshold_is_a_decade_below_the_upper_quartile():
    ref = 1000.0
    just_below, just_above = ref / FEW_BITS_FACTOR * 0.99, ref / FEW_BITS_FACTOR * 1.01
    table = bits_table([just_below, just_above, ref, ref, ref, ref, ref, ref])
    assert few_bits_mask(table, UNITS).tolist()[:2] == [True, False]


def corner_map(size: int = THUMBNAIL) -> np.ndarray:
    m = np.full((size, size), 0.01)
    m[:4, :4] = 1.0
    return m


@pytest.mark.parametrize("where, expected", [
    ((slice(0, 4), slice(0, 4)), "top-left corner"),
    ((slice(24, 28), slice(24, 28)), "bottom-right corner"),
    ((slice(0, 3), slice(None)), "top band"),
])
def test_a_class_mean_in_a_corner_or_band_is_named(where, expected):
    m = np.full((THUMBNAIL, THUMBNAIL), 0.01)
    m[where] = 1.0
    region, share, area = concentration_region(m)
    assert region == expected and share > 0.3 and share > 3 * area


def test_a_frame_is_the_border_and_a_spread_or_central_mean_is_nothing():
    frame = np.zeros((THUMBNAIL, THUMBNAIL))
    frame[:2], frame[-2:], frame[:, :2], frame[:, -2:] = 1.0, 1.0, 1.0, 1.0
    assert concentration_region(frame)[0] == "border"
    assert concentration_region(np.ones((THUMBNAIL, THUMBNAIL))) is None
    centre = np.zeros((THUMBNAIL, THUMBNAIL))
    centre[10:18, 10:18] = 1.0
    assert concentration_region(centre) is None
    assert concentration_region(np.zeros((THUMBNAIL, THUMBNAIL))) is None


def test_mass_thumbnails_are_bits_per_pixel_for_bits_and_shares_otherwise():
    thumbs = np.full((2, THUMBNAIL, THUMBNAIL), 1.0 / THUMBNAIL ** 2)
    rows = pd.DataFrame({"total_bits": [56.0 * 56.0, np.nan], "height": [56, 56], "width": [56, 56]})
    out = mass_thumbnails(thumbs, rows, bits=True)
    assert out[0] == pytest.approx(np.ones((THUMBNAIL, THUMBNAIL)), rel=1e-6)  # 1 bit on every pixel
    assert not out[1].any()  # no total: no bits
    assert mass_thumbnails(thumbs, rows, bits=False) == pytest.approx(thumbs)


class FakeRun:
    """What run_highlights reads of a Run: the table and the thumbnails of some of its rows."""

    def __init__(self, table: pd.DataFrame, thumbs: np.ndarray):
        self.table, self._thumbs = table, thumbs

    def thumbnails(self, rows: pd.DataFrame) -> np.ndarray:
        return self._thumbs[rows.index.to_numpy()]


def spread(rng) -> np.ndarray:
    t = rng.uniform(0.5, 1.5, (THUMBNAIL, THUMBNAIL))
    return t / t.sum()


def hand_built_run() -> tuple[FakeRun, set[str], str]:
    """Three classes of 8 maps: "cat" with 4 stamped images (few bits, mass in the top-left corner) and 4 ordinary
    ones; "dog" of ordinary maps, one of which looks at the bottom-right corner (an outlier); "fish" whose maps all
    look inside the top-left corner, off the border, with ordinary bits (its mean map concentrates there)."""
    rng = np.random.default_rng(0)
    rows, thumbs = [], []
    stamped = set()
    for cls, target in (("cat", 0), ("dog", 1), ("fish", 2)):
        for k in range(8):
            image = f"{cls}/{k}.png"
            t = spread(rng)
            bits = float(rng.uniform(5000, 8000))
            if cls == "cat" and k < 4:
                t = np.full((THUMBNAIL, THUMBNAIL), 1e-4)
                t[:3, :3] = 1.0
                t /= t.sum()
                bits = float(rng.uniform(20, 35))
                stamped.add(image)
            if cls == "fish":
                t = np.full((THUMBNAIL, THUMBNAIL), 1e-4)
                t[4:7, 4:7] = rng.uniform(0.8, 1.2, (3, 3))
                t /= t.sum()
            if cls == "dog" and k == 7:
                t = np.full((THUMBNAIL, THUMBNAIL), 1e-4)
                t[20:, 20:] = 1.0
                t /= t.sum()
            rows.append({"image": image, "method": "iba", "target": target, "class_name": cls, "map_index": k,
                         "error": None, "total_bits": bits, "height": 56, "width": 56,
                         "border_share": float(t[:3].sum() + t[-3:].sum() + t[3:-3, :3].sum() + t[3:-3, -3:].sum())})
            thumbs.append(t)
    table = pd.DataFrame(rows)
    thumbs = np.stack(thumbs).astype(np.float32)
    distances = np.zeros(len(table))
    for target in (0, 1, 2):
        where = (table["target"] == target).to_numpy()
        mean = thumbs[where].mean(axis=0).ravel()
        flat = thumbs[where].reshape(where.sum(), -1)
        distances[where] = 1 - flat @ mean / (np.linalg.norm(flat, axis=1) * np.linalg.norm(mean))
    table["distance_to_class_mean"] = distances
    return FakeRun(table, thumbs), stamped, "dog/7.png"


def test_run_highlights_on_a_hand_built_run():
    run, stamped, outlier = hand_built_run()
    found = run_highlights(run, "iba", UNITS)
    kinds = [h.kind for h in found.items]
    assert kinds[0] == "few_bits"  # the strongest cue leads
    assert set(found.items[0].images) == stamped
    assert "4 of 24 images need very few bits" in found.items[0].title
    clusters = [h for h in found.items if h.kind == "cluster"]
    assert clusters and all(h.target == 0 for h in clusters)  # only the stamped images' cluster is flagged
    assert set().union(*(set(h.images) for h in clusters)) == stamped
    # one cluster, naming the few-bits images again: drawn once, pointed to after
    assert len(clusters) == 1 and found.same_images_as(found.items.index(clusters[0])) == 0
    assert found.same_images_as(0) is None
    # class means in bits: cat's lies with its ordinary images (the stamped ones hold almost no bits), fish's in
    # the corner
    means = [h for h in found.items if h.kind == "class_mean"]
    assert [h.target for h in means] == [2] and "top-left corner" in means[0].title
    outliers = [h for h in found.items if h.kind == "outliers"]
    assert len(outliers) == 1 and outlier in outliers[0].images
    assert found.cluster_scale > 0 and found.reference_bits > 5000


def test_a_plain_run_has_nothing_to_show_and_says_what_was_checked():
    rng = np.random.default_rng(1)
    n = 12
    table = pd.DataFrame({"image": [f"{k}.png" for k in range(n)], "method": "iba", "target": [k % 2 for k in range(n)],
                          "class_name": [("a", "b")[k % 2] for k in range(n)], "map_index": np.arange(n),
                          "error": None, "total_bits": rng.uniform(500, 900, n), "height": 56, "width": 56,
                          "border_share": rng.uniform(0.3, 0.4, n), "distance_to_class_mean": rng.uniform(0, 0.1, n)})
    thumbs = np.stack([spread(rng) for _ in range(n)]).astype(np.float32)
    found = run_highlights(FakeRun(table, thumbs), "iba", UNITS)
    assert found.items == [] and "Checked 12 maps of 2 classes" in found.checked


def test_a_class_too_large_to_cluster_is_said_and_the_rest_still_checked(monkeypatch):
    from iba_core.runs import highlights

    run, stamped, _ = hand_built_run()
    monkeypatch.setattr(highlights, "MAX_ITEMS", 7)  # every class has 8 maps
    found = run_highlights(run, "iba", UNITS)
    assert not [h for h in found.items if h.kind == "cluster"]
    assert "were not clustered: cat, dog, fish" in found.checked
    assert set(found.items[0].images) == stamped  # the few-bits group and the class means do not need clusters
    assert [h.target for h in found.items if h.kind == "class_mean"] == [2]


def test_a_highlight_holds_every_image_and_names_the_first_few():
    from iba_core.runs.highlights import named

    images = tuple(f"{k}.png" for k in range(30))
    assert named(images, 3) == "0.png, 1.png, 2.png and 27 more"
    assert named(images[:2]) == "0.png, 1.png"
    # 30 stamped of 60: the group keeps all 30 (a filter on it must take every one), not the first few
    table = pd.DataFrame({"image": [f"{k}.png" for k in range(60)], "method": "iba", "target": 0, "class_name": "a",
                          "map_index": np.arange(60), "error": None,
                          "total_bits": [20.0] * 30 + [5000.0] * 30, "height": 56, "width": 56,
                          "border_share": 0.3, "distance_to_class_mean": 0.05})
    rng = np.random.default_rng(2)
    found = run_highlights(FakeRun(table, np.stack([spread(rng) for _ in range(60)]).astype(np.float32)), "iba",
                           UNITS)
    assert found.items[0].kind == "few_bits" and len(found.items[0].images) == 30


def test_flat_few_bits_maps_say_the_maps_cannot_locate_the_cue():
    """Few-bits maps whose top 5 % of pixels hold about 5 % (flat: the class survives on the noise alone) get the
    sentence on the statistics; concentrated ones (the hand-built stamped corner) do not."""
    run, stamped, _ = hand_built_run()
    located = run_highlights(run, "iba", UNITS).items[0]
    assert located.kind == "few_bits" and "nearly flat" not in located.detail
    table = run.table.copy()
    table["concentration"] = np.where(table["image"].isin(stamped), 0.06, 0.3)
    flat = run_highlights(FakeRun(table, run._thumbs), "iba", UNITS).items[0]
    assert "nearly flat" in flat.detail and "6%" in flat.detail and "statistics" in flat.detail
    table["concentration"] = np.where(table["image"].isin(stamped), FLAT_CONCENTRATION * 1.5, 0.3)
    assert "nearly flat" not in run_highlights(FakeRun(table, run._thumbs), "iba", UNITS).items[0].detail


def test_a_class_of_one_cluster_is_named_as_the_whole_class():
    members = pd.DataFrame({"image": ["a.png", "b.png"], "border_share": [0.7, 0.6], "total_bits": [5.0, 6.0]})
    whole = _cluster_highlight(members, 0, 1, "marked", {"a.png", "b.png"}, "iba", 0)
    assert whole.title == ("Class marked, all 2 images (one cluster): their maps put 65% of their mass in the "
                           "border; 100% of them need very few bits")
    part = _cluster_highlight(members, 1, 3, "marked", set(), "iba", 0)
    assert part.title == "Class marked, cluster 2 of 3, 2 images: their maps put 65% of their mass in the border"
