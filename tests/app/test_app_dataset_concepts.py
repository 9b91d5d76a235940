"""The concept atlas's logic (issue #41, item 2) on hand-built concept tables: the order of a class's concepts (bits
share, else effect), the crop box around a peak kept inside the crop, the numbers in words, the filter (a concept's
images, those that use it, best first), the shortcut candidates and the outline over the gallery's overlays."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from iba_core.app import dataset_concepts as dc
from iba_core.concepts.crops import peak_box

NAN = float("nan")


def concept(group: str, k: int, bits: float, effect: float, *, flagged: bool = False, reasons: str = "",
            target=0, name: str = "marked", using: int = 3, images: int = 4) -> dict:
    """One row of concepts.parquet as the contract writes it."""
    return {"target": target, "class_name": name, "group": group, "concept": k, "k": 3, "images": images,
            "images_using": using, "bits_share": bits, "p_full": 0.9, "p_without": 0.9 - effect,
            "p_only": 0.5, "effect": effect, "area": 0.2, "peak_spread": 0.3, "negative_share": 0.0,
            "flagged": flagged, "flag_reasons": reasons, "top_images": "[]"}


def image(group: str, k: int, key: str, rank: int, uses: bool, peak=(0.5, 0.5)) -> dict:
    """One row of concept_images.parquet."""
    return {"image": key, "target": 0, "group": group, "concept": k, "presence": 0.5, "bits_share": 0.3,
            "uses": uses, "p_full": 0.9, "p_without": 0.5, "p_only": 0.5, "peak_x": peak[0], "peak_y": peak[1],
            "rank": rank, "map_file": "maps/x.npz", "map_index": 0, "map_scale": 1.0, "grid_h": 4, "grid_w": 4}


class FakeSet:
    """What the atlas reads of a `ConceptSet`: its two tables and its concept maps (here: a hand-made map per
    image, upsampled by repetition)."""

    def __init__(self, concepts: list[dict], images: list[dict], maps: dict[str, np.ndarray] | None = None):
        columns = list(concept("all", 0, 0, 0)), list(image("all", 0, "", 1, False))
        self.concepts = pd.DataFrame(concepts, columns=columns[0]).astype({"target": "Int64"})
        self.images = pd.DataFrame(images, columns=columns[1]).astype({"target": "Int64"})
        self.maps = maps or {}
        self.info, self.missing, self.path = {"layer": "features.3", "k": None, "k_max": 8}, None, "r/concepts/s"

    def concept_map(self, row, size):
        grid = self.maps[str(row["image"])]
        return np.kron(grid, np.ones((size[0] // grid.shape[0], size[1] // grid.shape[1]))).astype(np.float32)


def test_a_class_s_concepts_come_most_bits_share_first_and_by_effect_without_bits() -> None:
    table = pd.DataFrame([concept("class-0", 0, 0.2, 0.1), concept("class-0", 1, 0.5, 0.0),
                          concept("class-0", 2, 0.2, 0.4), concept("class-1", 0, 0.9, 0.9, target=1)])
    assert list(dc.ordered_concepts(table, "class-0")["concept"]) == [1, 2, 0]  # a tie in share: larger effect
    no_bits = pd.DataFrame([concept("all", 0, NAN, 0.1, target=pd.NA), concept("all", 1, NAN, 0.3, target=pd.NA),
                            concept("all", 2, NAN, -0.05, target=pd.NA)])
    assert list(dc.ordered_concepts(no_bits, "all")["concept"]) == [1, 0, 2]
    # by effect: a concept with few bits but the whole effect first (ties by bits share)
    assert list(dc.ordered_concepts(table, "class-0", by="effect")["concept"]) == [2, 0, 1]
    with pytest.raises(ValueError):
        dc.ordered_concepts(table, "class-0", by="area")


def test_flagged_concepts_come_first_and_the_groups_are_the_classes_then_the_whole_run() -> None:
    table = pd.DataFrame([concept("all", 0, 0.6, 0.1, target=pd.NA, name=""),
                          concept("class-1", 0, 0.7, 0.1, target=1, name="object"),
                          concept("class-0", 0, 0.6, 0.1), concept("class-0", 1, 0.3, 0.5, flagged=True,
                                                                   reasons="small, at one position")])
    table["target"] = table["target"].astype("Int64")
    assert dc.groups(table) == [("class-0", "class marked"), ("class-1", "class object"),
                                ("all", "the whole run")]
    assert list(dc.flagged_first(table, "class-0")["concept"]) == [1, 0]


@pytest.mark.parametrize("peak, box", [
    ((0.5, 0.5), (22, 22, 43, 43)),      # the middle: centred
    ((0.0, 0.0), (0, 0, 21, 21)),        # a corner: moved inside, not cut
    ((1.0, 0.98), (43, 43, 64, 64)),     # the other corner
    ((0.99, 0.1), (43, 0, 64, 21)),
])
def test_the_crop_around_a_peak_is_a_third_of_the_crop_and_stays_inside(peak, box) -> None:
    assert peak_box(*peak, 64, 64) == box
    left, top, right, bottom = box
    assert right - left == bottom - top == round(64 / 3)


def test_the_crop_box_of_a_wide_crop_is_square_on_its_shorter_side() -> None:
    left, top, right, bottom = peak_box(0.9, 0.5, 300, 90)
    assert right - left == bottom - top == 30 and right <= 300 and top >= 0


def test_a_concept_s_numbers_in_words() -> None:
    row = pd.Series(concept("class-0", 1, 0.34, 0.41, using=7, images=10))
    assert dc.concept_caption(row) == ("34% of the bits · removing it drops p by 0.41 (0.90 → 0.49); alone it keeps "
                                       "p at 0.50 · used by 7 of 10 images")
    assert dc.concept_title(row) == "Concept 2"
    no_bits = pd.Series(concept("all", 0, NAN, -0.1, using=1, images=1))
    assert dc.concept_caption(no_bits).startswith("removing it raises p by 0.10")
    assert "1 image" in dc.concept_caption(no_bits) and "images" not in dc.concept_caption(no_bits)
    unused = pd.Series(concept("class-0", 2, 0.01, -1e-8))  # a change that would read "by 0.00": none
    assert dc.effect_text(unused) == "removing it leaves p at 0.90; alone it keeps p at 0.50"


def test_a_concept_s_images_are_those_that_use_it_best_first() -> None:
    cs = FakeSet([concept("class-0", 0, 0.5, 0.2)],
                 [image("class-0", 0, "b.png", 2, True), image("class-0", 0, "a.png", 3, False),
                  image("class-0", 0, "c.png", 1, True), image("class-0", 1, "d.png", 1, True)])
    assert dc.concept_images(cs, "class-0", 0) == ("c.png", "b.png")
    assert dc.concept_images(cs, "class-0", 1) == ("d.png",)
    assert dc.concept_images(cs, "class-1", 0) == ()


def test_the_shortcut_candidates_lead_with_their_reasons_and_images() -> None:
    cs = FakeSet([concept("class-0", 0, 0.6, 0.1), concept("class-0", 1, 0.3, 0.5, flagged=True,
                                                           reasons="small (4% of the crop)"),
                  concept("all", 0, 0.4, 0.5, flagged=True, reasons="used by a minority", target=pd.NA, name="")],
                 [image("class-0", 1, "m1.png", 1, True), image("class-0", 1, "m2.png", 2, False),
                  image("all", 0, "m1.png", 1, True)])
    found = dc.shortcut_highlights(cs)
    assert [h.row["group"] for h in found] == ["class-0", "all"]
    first = found[0]
    assert first.title == "Class marked, concept 2: a shortcut candidate"
    assert first.reasons == "small (4% of the crop)" and first.images == ("m1.png",)
    assert dc.shortcut_highlights(FakeSet([concept("class-0", 0, 0.6, 0.1)], [])) == []
    # most telling first: the larger of bits share and effect, across groups
    cs = FakeSet([concept("class-0", 0, 0.3, 0.1, flagged=True), concept("class-1", 0, NAN, 0.9, flagged=True,
                                                                         target=1, name="object")], [])
    assert [h.row["group"] for h in dc.shortcut_highlights(cs)] == ["class-1", "class-0"]


def test_the_gallery_outlines_where_the_focused_concept_is_active() -> None:
    grid = np.zeros((4, 4))
    grid[0, 0], grid[3, 3] = 1.0, 0.2  # its peak in the top-left cell; a weak spot below half its maximum
    cs = FakeSet([concept("class-0", 0, 0.5, 0.2)],
                 [image("class-0", 0, "a.png", 1, True), image("class-0", 0, "z.png", 2, True)],
                 {"a.png": grid, "z.png": np.zeros((4, 4))})
    rows = pd.DataFrame({"image": ["a.png", "b.png", "z.png"]}, index=[10, 11, 12])
    masks = dc.outline_masks(cs, dc.ConceptFocus("set", "class-0", 0), rows, {10: (8, 8), 11: (8, 8), 12: (8, 8)})
    assert set(masks) == {10}  # b.png is not in the set; z.png holds nothing of the concept
    expected = np.zeros((8, 8), dtype=bool)
    expected[:2, :2] = True
    assert (masks[10] == expected).all()


def test_what_a_concept_set_was_made_with_in_one_sentence() -> None:
    cs = FakeSet([], [])
    assert dc.set_text(cs) == ("Concept set s: layer features.3, K per group at the elbow of the reconstruction error "
                               "(up to 8), no bits (the run has no bottleneck method), the layer's activations "
                               "factorised.")
    cs.info = {"layer": "block3", "k": 4, "method": "iba_10", "transform": "positive part"}
    assert dc.set_text(cs) == ("Concept set s: layer block3, K = 4 per group, the bits of iba_10, the layer's positive "
                               "part factorised.")


def test_the_report_draws_the_strips_of_the_flagged_concepts_and_of_each_group_s_first_few(monkeypatch) -> None:
    """A run of many classes must not make a report of tens of thousands of pictures: the others get their numbers."""
    rows = [concept("class-0", k, 0.5 - 0.05 * k, 0.1, flagged=(k == 5)) for k in range(6)]
    cs = FakeSet(rows, [])
    monkeypatch.setattr(dc, "run_concepts", lambda run: cs)
    monkeypatch.setattr(dc, "concept_strip", lambda run, concepts, row, trust, n: [
        dc.StripCell(f"concept {int(row['concept'])}", b"png", "")])
    found = dc.report_concepts(None, None)
    concepts = found["groups"][0]["concepts"]
    assert [c["title"] for c in concepts] == ["Concept 6", "Concept 1", "Concept 2", "Concept 3", "Concept 4",
                                              "Concept 5"]  # the flagged one first
    assert [bool(c["cells"]) for c in concepts] == [True, True, True, False, False, False]
    assert found["set"].startswith("Concept set s: layer features.3")
    monkeypatch.setattr(dc, "run_concepts", lambda run: None)
    assert dc.report_concepts(None, None) is None
