"""The issue's shortcut test (#41): on the shortcut fixture (class "marked" is told only by a red square in the
top-left corner; tests/runs/run_fixtures.py), the mark's concept is found without naming it — among the class's top 3
concepts by bits share or by effect, flagged as a shortcut candidate, its peaks on the mark — and also in a run
without bits (the ranking by effect alone must find it: a class that keeps its class through noise carries few
bits)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import MARK, SIZE, load_card, make_shortcut_run  # noqa: E402

from iba_core.concepts import find_concepts, open_concepts  # noqa: E402

MARKED = 0  # the class "marked"
#: A peak lies on the mark when its cell's centre does: cells of 4 px, the mark 8 px from the corner.
ON_MARK = MARK / SIZE


def _mark_concepts(found, by: str) -> list:
    """The class's concepts among its top 3 by `by` that are flagged and peak on the mark in every top image."""
    rows = found.group(MARKED).sort_values(by, ascending=False).head(3)
    out = []
    for _, c in rows.iterrows():
        top = found.image_rows(MARKED, int(c["concept"])).head(5)
        on_mark = bool(((top["peak_x"] < ON_MARK) & (top["peak_y"] < ON_MARK)).all())
        if c["flagged"] and on_mark:
            out.append(c)
    return out


@pytest.fixture(scope="module")
def bits_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("concept-shortcut")
    run_dir, keys = make_shortcut_run(root)
    network = load_card(root / "card" / "tiny.toml")
    summary = find_concepts(network, run_dir)
    return open_concepts(run_dir), keys, summary


def test_the_mark_is_a_flagged_concept_with_its_peaks_on_the_mark(bits_run):
    found, keys, summary = bits_run
    assert summary.done == ["class-0", "class-1", "all"] and not summary.unreadable
    hits = _mark_concepts(found, "bits_share") or _mark_concepts(found, "effect")
    assert hits, found.group(MARKED)[["concept", "bits_share", "effect", "area", "peak_spread", "flag_reasons"]]
    mark = hits[0]
    assert "one position" in mark["flag_reasons"] or "small" in mark["flag_reasons"]
    # its top images are marked images, and its concept map over the crop is strongest in the corner
    top = found.image_rows(MARKED, int(mark["concept"])).head(3)
    assert all(keys[k] for k in top["image"])
    concept_map = found.concept_map(top.iloc[0], size=(SIZE, SIZE))
    assert concept_map[:MARK, :MARK].mean() > 3 * concept_map.mean()


def test_the_other_class_has_no_concept_at_one_position(bits_run):
    """The object class's square moves from image to image: none of its concepts is flagged for sitting at one place."""
    found, _, _ = bits_run
    assert not found.group(1)["flag_reasons"].str.contains("one position").any()


def test_without_bits_the_effect_finds_the_mark(tmp_path_factory):
    root = tmp_path_factory.mktemp("concept-shortcut-saliency")
    run_dir, _ = make_shortcut_run(root, methods=["saliency"])  # no bottleneck: no bits in the run
    network = load_card(root / "card" / "tiny.toml")
    find_concepts(network, run_dir)
    found = open_concepts(run_dir)
    assert found.concepts["bits_share"].isna().all()
    assert _mark_concepts(found, "effect"), found.group(MARKED)[["concept", "effect", "area", "flag_reasons"]]
