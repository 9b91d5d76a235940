"""A group's concept table (concepts/group_table.py) from hand-made image × concept rows: the pooled bits share, the
means, the area over the images using a concept, the spread of its top images' peaks, the order and the flag."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from iba_core.concepts.group_table import TOP_IMAGES, group_table

IMAGES = ["a", "b", "c", "d"]
TOTAL = {"a": 10.0, "b": 30.0, "c": 20.0, "d": 40.0}
P_FULL = {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.6}
P_NONE = {"a": 0.6, "b": 0.5, "c": 0.4, "d": 0.5}  # nothing kept: mean 0.5
#: per fit_index: bits, uses, presence, area, p_without, p_only, peak_x, peak_y (one value per image a … d)
CONCEPTS = {
    0: dict(bits=[2, 3, 2, 3], uses=[True, True, True, False], presence=[0.5, 0.4, 0.3, 0.2],
            area=[0.5, 0.6, 0.7, 0.8], p_without=[0.85, 0.75, 0.65, 0.55], p_only=[0.3, 0.3, 0.3, 0.3],
            peak_x=[0.1, 0.9, 0.1, 0.9], peak_y=[0.1, 0.1, 0.9, 0.9]),
    # a small mark in the same corner of every image, holding 90 % of the bits: a shortcut candidate
    1: dict(bits=[8, 27, 18, 37], uses=[True] * 4, presence=[0.5, 0.6, 0.7, 0.8], area=[0.05] * 4,
            p_without=[0.2, 0.3, 0.4, 0.5], p_only=[0.8, 0.7, 0.6, 0.5], peak_x=[0.1] * 4, peak_y=[0.1] * 4),
}


def rows(with_bits: bool = True) -> pd.DataFrame:
    out = []
    for k, c in CONCEPTS.items():
        for i, image in enumerate(IMAGES):
            total = TOTAL[image] if with_bits else float("nan")
            bits = c["bits"][i] if with_bits else float("nan")
            out.append({"image": image, "fit_index": k, "bits": bits, "total_bits": total,
                        "bits_share": bits / total, "p_full": P_FULL[image], "p_none": P_NONE[image],
                        **{name: c[name][i] for name in ("uses", "presence", "area", "p_without", "p_only",
                                                         "peak_x", "peak_y")}})
    return pd.DataFrame(out)


def test_group_table_by_hand():
    table = group_table(rows(), "class-3", 3, "mark", {"k": 2, "negative_share": 0.25})
    assert list(table["fit_index"]) == [1, 0] and list(table["concept"]) == [0, 1]  # most bits first
    mark, other = table.iloc[0], table.iloc[1]
    assert mark["bits_share"] == pytest.approx(90 / 100, rel=1e-4)  # pooled: Σ bits / Σ the images' bits
    assert other["bits_share"] == pytest.approx(10 / 100, rel=1e-4)  # (the mean of the images' shares is 0.119)
    assert (mark["images"], mark["images_using"], other["images_using"]) == (4, 4, 3)
    assert mark["p_full"] == pytest.approx(0.75, rel=1e-4)
    assert mark["p_without"] == pytest.approx(0.35, rel=1e-4) and mark["effect"] == pytest.approx(0.4, rel=1e-4)
    assert mark["p_only"] == pytest.approx(0.65, rel=1e-4)
    assert other["effect"] == pytest.approx(0.05, rel=1e-4)
    assert mark["p_none"] == pytest.approx(0.5, rel=1e-4)
    assert mark["kept"] == pytest.approx((0.65 - 0.5) / (0.75 - 0.5), rel=1e-4)  # of class means: 0.6
    assert other["kept"] == pytest.approx((0.3 - 0.5) / (0.75 - 0.5), rel=1e-4)  # worse than nothing kept
    assert other["area"] == pytest.approx(0.6, rel=1e-4)  # over the three images using it, not d's 0.8
    assert mark["peak_spread"] == pytest.approx(0.0, abs=1e-12)
    assert other["peak_spread"] == pytest.approx(math.sqrt(0.32), rel=1e-4)  # four corners of a 0.8 square
    assert json.loads(mark["top_images"]) == ["d", "c", "b", "a"]  # by presence
    assert json.loads(other["top_images"]) == ["a", "b", "c", "d"]
    assert mark["flagged"] and not other["flagged"]
    assert mark["flag_reasons"] == ("small (it covers 5% of the crop); at one position in every image; carries 90% of "
                                    "the bits; removing it lowers p(class) by 0.40; alone it keeps 60% of p(class)")
    assert other["flag_reasons"] == ""
    assert set(table["target"]) == {3} and set(table["class_name"]) == {"mark"} and set(table["group"]) == {"class-3"}
    assert set(table["k"]) == {2} and set(table["negative_share"]) == {0.25} and table["fit_error"].isna().all()
    assert set(group_table(rows(), "class-3", 3, "mark", {"k": 2, "error": 0.125})["fit_error"]) == {0.125}


def test_without_bits_the_order_is_by_effect():
    table = group_table(rows(with_bits=False), "all", None, "all images", {"k": 2})
    assert list(table["fit_index"]) == [1, 0]  # effect 0.4 before 0.05
    assert table["bits_share"].isna().all() and set(table["bits_rank"]) == {0}
    assert list(table["effect_rank"]) == [1, 2]
    assert table.iloc[0]["flag_reasons"].endswith("removing it lowers p(class) by 0.40; alone it keeps 60% of p(class)")
    assert "of the bits" not in table.iloc[0]["flag_reasons"]


def test_kept_is_nan_where_nothing_kept_decides_as_much():
    frame = rows().assign(p_none=lambda f: f["p_full"])  # p(target) without the positive part as with it
    table = group_table(frame, "class-3", 3, "mark", {"k": 2})
    assert table["kept"].isna().all() and set(table["kept_rank"]) == {0}
    assert "alone" not in table.iloc[0]["flag_reasons"]


def test_a_concept_no_image_uses_takes_the_area_of_its_top_images():
    frame = rows()
    frame.loc[frame["fit_index"] == 0, "uses"] = False
    other = group_table(frame, "class-3", 3, "mark", {"k": 2}).set_index("fit_index").loc[0]
    assert other["images_using"] == 0 and other["area"] == pytest.approx(0.65, rel=1e-4)  # mean of all four


def test_top_images_are_capped_and_skip_absent_images():
    many = pd.DataFrame([{"image": f"i{n:02d}", "fit_index": 0, "bits": 1.0, "total_bits": 2.0, "bits_share": 0.5,
                          "uses": True, "presence": 0.0 if n == 0 else n / 100, "area": 0.5, "p_full": 0.5,
                          "p_none": 0.1,
                          "p_without": 0.4, "p_only": 0.3, "peak_x": 0.5, "peak_y": 0.5} for n in range(12)])
    top = json.loads(group_table(many, "class-0", 0, "x", {"k": 1}).iloc[0]["top_images"])
    assert len(top) == TOP_IMAGES and top[0] == "i11" and "i00" not in top
