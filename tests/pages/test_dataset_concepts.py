"""The Dataset page's concept atlas (issue #41, item 2) through AppTest, on the shortcut run (a tiny CNN whose class
"marked" is told only by a red corner mark) with a concept set found by `find_concepts`: the atlas lists each class's
concepts in the order of their bits share with their strips, "Show its images" narrows the table and gallery to the
images that use the concept and outlines it over each overlay, a shortcut candidate leads "What stands out", the
report gains a concept section, a run without concepts offers the form that finds them (its time said first, the
network the run was made with required), and a damaged concept set opens with what is intact, the rest said."""
from __future__ import annotations

import io
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest

from page_helpers import assert_clean, opened_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import load_card, make_shortcut_run  # noqa: E402

from iba_core.app import concept_job  # noqa: E402
from iba_core.app import dataset_concepts as dc  # noqa: E402
from iba_core.concepts import ConceptSettings, find_concepts, open_concepts  # noqa: E402
from iba_core.runs import open_run  # noqa: E402
from pages.widgets import concept_atlas  # noqa: E402
from pages.widgets.text import plain  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "app.py"
TIMEOUT = 180


@pytest.fixture(scope="module")
def shortcut(tmp_path_factory):
    """(run folder with a concept set, the same run without one, {image: marked}); the run inside a folder the app
    may read (IBA_DATA_DIRS), the tiny network's card in the models folder (IBA_MODELS_DIR), its code allowed."""
    root = tmp_path_factory.mktemp("dataset_concepts") / "data_root"
    run_dir, keys = make_shortcut_run(root, per_class=6)
    bare = root / "run_without_concepts"
    shutil.copytree(run_dir, bare)
    find_concepts(load_card(root / "card" / "tiny.toml"), run_dir, ConceptSettings(k=3))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IBA_DATA_DIRS", str(root))
        mp.setenv("IBA_MODELS_DIR", str(root / "card"))
        mp.setenv("IBA_TRUST_CODE", "1")  # the card's builder is Python code
        yield run_dir, bare, keys


def opened(run_dir) -> AppTest:
    return opened_run(APP, run_dir, TIMEOUT)


def infos(at: AppTest) -> list[str]:
    """The st.info texts, without the escapes that keep them from reading as Markdown."""
    return [i.value.replace("\\", "") for i in at.info]


def table_images(at: AppTest) -> list[str]:
    return sorted(at.dataframe[0].value["image"])


def pictures_in(at: AppTest, key: str) -> list:
    """The st.image elements inside the container `key`."""
    found = []

    def walk(node, inside: bool) -> None:
        inside = inside or getattr(node, "key", None) == key
        if getattr(node, "type", None) == "image" and inside:
            found.append(node)
        for child in getattr(node, "children", {}).values():
            walk(child, inside)

    walk(at.main, False)
    return found


def concept_titles(at: AppTest) -> list[str]:
    """The atlas's concept lines ("**Concept 2** · …"), in page order."""
    return [m.value.split("**")[1] for m in at.markdown if m.value.startswith("**Concept ")]


def test_the_atlas_lists_each_class_s_concepts_by_bits_share_with_their_strips(shortcut) -> None:
    run_dir, _, _ = shortcut
    concepts = open_concepts(run_dir)
    at = opened(run_dir)
    assert not at.error, [e.value for e in at.error]
    assert any(h.value == "Concepts" for h in at.subheader)
    for group, _ in dc.groups(concepts.concepts):
        at.selectbox(key="ds_concept_group").set_value(group).run()
        assert_clean(at)
        expected = [dc.concept_title(r) for _, r in dc.ordered_concepts(concepts.concepts, group).iterrows()]
        assert concept_titles(at) == expected and len(expected) == 3  # K = 3, in the order of bits share
        shares = dc.ordered_concepts(concepts.concepts, group)["bits_share"].to_list()
        assert shares == sorted(shares, reverse=True)
        for _, row in dc.ordered_concepts(concepts.concepts, group).iterrows():
            k = int(row["concept"])
            assert at.button(key=f"ds_concept_show_{group}_{k}").label == f"Show its {int(row['images_using'])} images"
        # each concept's numbers in words beside its strip of top crops
        captions = [c.value for c in at.caption]
        for _, row in dc.ordered_concepts(concepts.concepts, group).iterrows():
            assert plain(dc.concept_caption(row)) in captions
            assert "of the bits" in dc.concept_caption(row) and "used by" in dc.concept_caption(row)
            assert len(pictures_in(at, f"ds_concept_{group}_{int(row['concept'])}")) == min(
                dc.STRIP_IMAGES, len(dc.concept_rows(concepts, group, int(row["concept"]))))


def test_the_atlas_orders_by_effect_on_request(shortcut) -> None:
    """A cue the class keeps through pure noise carries few bits, yet the effect shows it: the atlas orders by it on
    request (on this run both orders agree; tests/app/test_app_dataset_concepts.py has concepts where they differ)."""
    run_dir, _, _ = shortcut
    concepts = open_concepts(run_dir)
    at = opened(run_dir)
    at.selectbox(key="ds_concept_group").set_value("class-1").run()
    at.radio(key="ds_concept_order").set_value("effect").run()
    assert_clean(at)
    rows = dc.ordered_concepts(concepts.concepts, "class-1", "effect")
    assert concept_titles(at) == [dc.concept_title(r) for _, r in rows.iterrows()]
    effects = rows["effect"].to_list()
    assert effects == sorted(effects, reverse=True)
    assert any(c.value.startswith("Most effect first") for c in at.caption)


def test_show_its_images_narrows_the_table_and_gallery_and_outlines_the_concept(shortcut) -> None:
    run_dir, _, keys = shortcut
    concepts = open_concepts(run_dir)
    group = "class-0"
    row = dc.ordered_concepts(concepts.concepts, group).iloc[0]
    wanted = dc.concept_images(concepts, group, int(row["concept"]))
    assert wanted
    at = opened(run_dir)
    at.selectbox(key="ds_concept_group").set_value(group).run()
    at.button(key=f"ds_concept_show_{group}_{int(row['concept'])}").click().run()
    assert_clean(at)
    assert table_images(at) == sorted(wanted)
    assert any("Showing only the images of: concept" in i.value and "outlines where it is active" in i.value
               for i in at.info)
    # every gallery overlay now carries the concept's outline (the cyan of `render.overlays.OUTLINE_RGB`)
    from iba_core.app import dataset_gallery
    from iba_core.render.overlays import OUTLINE_RGB
    from iba_core.trust import Trust

    run = open_run(run_dir)
    rows = run.table[run.table["image"].isin(wanted)]
    outlines = lambda r, sizes: dc.outline_masks(concepts, dc.ConceptFocus(str(concepts.path), group,  # noqa: E731
                                                                         int(row["concept"])), r, sizes)
    with_outline = dataset_gallery.gallery(run, rows, Trust.local(), outlines=outlines, with_links=False)
    without = dataset_gallery.gallery(run, rows, Trust.local(), with_links=False)
    for a, b in zip(with_outline, without):
        pa = np.asarray(Image.open(io.BytesIO(a.png)).convert("RGB"))
        pb = np.asarray(Image.open(io.BytesIO(b.png)).convert("RGB"))
        cyan = (pa == OUTLINE_RGB).all(axis=-1).sum() - (pb == OUTLINE_RGB).all(axis=-1).sum()
        assert cyan > 0, a.caption
    at.button(key="ds_focus_clear").click().run()
    assert table_images(at) == sorted(keys)


def test_a_shortcut_candidate_leads_what_stands_out_with_a_picture_of_where(shortcut) -> None:
    run_dir, _, _ = shortcut
    concepts = open_concepts(run_dir)
    expected = dc.shortcut_highlights(concepts)
    at = opened(run_dir)
    titles = [m.value.strip("*") for m in at.markdown if m.value.startswith("**") and m.value.endswith("**")]
    if not expected:
        pytest.fail("the shortcut run's mark was not flagged: the core's concern (tests/concepts), noted here")
    assert titles[0] == plain(expected[0].title)  # before the few-bits highlight
    # with a picture of where: its concept map over its top images
    assert len(pictures_in(at, "ds_concept_highlight_0")) == min(concept_atlas.HIGHLIGHT_PICTURES, len(dc.concept_rows(
        concepts, str(expected[0].row["group"]), int(expected[0].row["concept"]))))
    assert at.button(key="ds_concept_focus_0")
    at.button(key="ds_concept_focus_0").click().run()
    assert table_images(at) == sorted(expected[0].images)


def test_the_report_has_a_concept_section_only_for_a_run_with_concepts(shortcut, tmp_path) -> None:
    from iba_core.cli import main

    run_dir, bare, _ = shortcut
    for folder, present in ((run_dir, True), (bare, False)):
        out = tmp_path / f"{folder.name}.html"
        assert main(["report", str(folder), "--out", str(out)]) == 0
        html = out.read_text(encoding="utf-8")
        assert ('<h2 id="concepts">' in html) is present
        if present:
            section = html.split('<h2 id="concepts">', 1)[1].split("<h2", 1)[0]
            assert "<h3>Class marked</h3>" in section and "<h3>The whole run</h3>" in section
            concepts = open_concepts(folder)
            # per group, the shortcut candidates first, each concept with its strip's pictures embedded
            for group, name in dc.groups(concepts.concepts):
                part = section.split(f"<h3>{name[:1].upper() + name[1:]}</h3>", 1)[1].split("<h3>", 1)[0]
                lines = part.split("<p><b>")[1:]
                flagged = list(dc.flagged_first(concepts.concepts, group)["flagged"])
                assert ["shortcut candidate" in line for line in lines] == flagged
            shown = sum(min(dc.STRIP_IMAGES, len(dc.concept_rows(concepts, str(r["group"]), int(r["concept"]))))
                        for _, r in concepts.concepts.iterrows())  # K = 3: every concept's strip is drawn
            assert section.count("data:image/png;base64,") == shown


def test_a_run_without_concepts_offers_the_form_with_its_time_and_finds_them(shortcut, tmp_path) -> None:
    _, bare, _ = shortcut
    folder = bare.parent / "bare_copy"
    shutil.copytree(bare, folder)
    at = opened(folder)
    assert_clean(at)
    # the app's default network is not the run's: one sentence says so, and no form is offered
    assert any("is not the one this run was made with" in t for t in infos(at)), infos(at)
    assert not [b for b in at.button if b.key == "ds_concepts_start"]
    at.selectbox(key="network").set_value(str((bare.parent / "card" / "tiny.toml").resolve())).run()
    assert_clean(at)
    at.button(key="ds_concepts_estimate").click().run()
    assert_clean(at)
    estimate = [t for t in infos(at) if t.startswith("Estimate: the 3 groups (24 images in all")]
    assert estimate and "take about" in estimate[0], infos(at)  # two classes of 6 images, and the whole run
    assert concept_job.current_job() is None or concept_job.current_job().run_dir != folder
    at.number_input(key="ds_concepts_k").set_value(2)
    at.button(key="ds_concepts_start").click().run()
    assert_clean(at)
    assert not [t for t in infos(at) if t.startswith("Estimate:")]  # it was for K auto, not for the K = 2 started
    job = concept_job.current_job()
    assert job is not None and Path(job.run_dir) == folder
    assert job.wait(120), "concept discovery did not finish"
    assert job.error is None, job.error
    at.run()
    assert_clean(at)
    assert len(concept_titles(at)) == 2  # K = 2, as asked


def test_a_damaged_concept_set_opens_with_what_is_intact_and_says_what_is_left_out(shortcut) -> None:
    run_dir, _, _ = shortcut
    copy = run_dir.parent / "damaged_concepts"
    shutil.copytree(run_dir, copy)
    table = next((copy / "concepts").glob("*/groups/class-1.parquet"))
    table.write_bytes(table.read_bytes()[:40])  # cut short
    at = opened(copy)
    assert not at.error, [e.value for e in at.error]
    warnings = [w.value.replace("\\", "") for w in at.warning]
    assert any("damaged" in w and "class-1" in w for w in warnings), warnings
    options = at.selectbox(key="ds_concept_group").options  # as shown: "Class marked", …
    assert "Class marked" in options and not any("object" in o for o in options)
    assert concept_titles(at)  # the intact classes' concepts are shown


def test_what_stands_out_shows_the_three_most_telling_shortcut_candidates_and_counts_the_rest(shortcut,
                                                                                             monkeypatch) -> None:
    """A run of many classes may flag many concepts: the first screen shows the most telling few, says how many
    more, and the atlas flags each."""
    run_dir, _, _ = shortcut
    real = dc.shortcut_highlights
    monkeypatch.setattr(dc, "shortcut_highlights", lambda concepts: real(concepts) * 3)  # as if many were flagged
    found = real(open_concepts(run_dir)) * 3
    at = opened(run_dir)
    assert_clean(at)
    shown = [key for key in (f"ds_concept_focus_{i}" for i in range(len(found)))
             if [b for b in at.button if b.key == key]]
    assert len(shown) == concept_atlas.HIGHLIGHT_CONCEPTS < len(found)
    more = len(found) - concept_atlas.HIGHLIGHT_CONCEPTS
    assert any(c.value.startswith(f"{more} more shortcut candidates") for c in at.caption)
