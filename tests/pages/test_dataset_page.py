"""The Dataset page (issue #22, point 6) through AppTest, on a folder run of the shortcut data set (a tiny CNN
trained in the fixture on images whose class "marked" is told only by a corner mark): open the run, filter it, the
cluster view lists the members `map_clusters` finds (the marked images apart), the link to Per-Sample carries the
run's network, layer and class, a path outside the allowed folders is refused, the HTML report names the classes."""
from __future__ import annotations

import sys
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from streamlit.testing.v1 import AppTest

from page_helpers import assert_clean, opened_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import LAYER, make_shortcut_run  # noqa: E402

from iba_core import open_run  # noqa: E402
from iba_core.runs import map_clusters  # noqa: E402
from pages.widgets.text import plain  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "app.py"
TIMEOUT = 180


@pytest.fixture(scope="module")
def shortcut(tmp_path_factory) -> tuple[Path, dict[str, bool]]:
    """The run folder (inside a folder the app may read: IBA_DATA_DIRS) and {image: marked}."""
    root = tmp_path_factory.mktemp("dataset_page")
    run_dir, keys = make_shortcut_run(root / "data_root", per_class=6)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IBA_DATA_DIRS", str(root / "data_root"))
        yield run_dir, keys


def opened(run_dir: Path | str) -> AppTest:
    return opened_run(APP, run_dir, TIMEOUT)


def made_report(at: AppTest) -> str:
    """Press "Make the HTML report" on the opened run; the report's text."""
    at.button(key="ds_report_button").click().run()
    assert_clean(at)
    return at.session_state["ds_report"].decode("utf-8")


def table_images(at: AppTest) -> list[str]:
    """The images of the page's table (its first dataframe; the run has no error rows)."""
    return sorted(at.dataframe[0].value["image"])


def test_open_and_filter_a_run(shortcut) -> None:
    run_dir, keys = shortcut
    at = opened(run_dir)
    assert not at.error, [e.value for e in at.error]
    assert table_images(at) == sorted(keys)
    at.multiselect(key="ds_classes").select("marked").run()
    assert table_images(at) == sorted(k for k, m in keys.items() if m)
    at.multiselect(key="ds_classes").unselect("marked").run()
    at.radio(key="ds_correct").set_value("incorrect").run()
    assert table_images(at) == []  # the trained network gets every image right
    assert any("No row passes the filters" in i.value for i in at.info)
    at.radio(key="ds_correct").set_value("correct").run()
    assert table_images(at) == sorted(keys)
    # the gallery: one bits scale for the view, stated
    assert any("bits per pixel" in c.value and "One colour scale" in c.value for c in at.caption)


def test_the_cluster_view_lists_the_members_map_clusters_finds(shortcut) -> None:
    run_dir, keys = shortcut
    at = opened(run_dir)
    run = open_run(run_dir)
    for target in (0, 1):
        at.selectbox(key="ds_class_iba_10").set_value(target).run()
        assert_clean(at)
        groups = map_clusters(run, "iba_10", target)
        expected = sorted(sorted(plain(m) for m in groups.members(c)["image"]) for c in range(groups.k))
        shown = sorted(sorted(c.value[len("Members: "):].split(", ")) for c in at.caption
                       if c.value.startswith("Members: "))
        assert shown == expected
    # class "marked": every map lies in the corner, so its clusters are flagged as a border shortcut
    at.selectbox(key="ds_class_iba_10").set_value(0).run()
    assert any("border shortcut?" in m.value for m in at.markdown)


def test_the_gallery_links_open_per_sample_with_the_runs_network_layer_and_class(shortcut) -> None:
    run_dir, keys = shortcut
    at = opened(run_dir)
    found = [m.value for m in at.markdown if "[Per-Sample](per_sample?" in m.value]
    assert len(found) == min(len(keys), 12)
    table = open_run(run_dir).table.set_index("image")
    for text in found:
        url = text.split("[Per-Sample](", 1)[1].rstrip(")")
        params = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
        assert params["network"] == "card:tiny" and params["layer"] == LAYER and params["beta_k"] == "10"
        assert params["image"].startswith("upload:")  # the image is kept like an upload: no server path in a link
        image = next(k for k in keys if plain(k) in text)
        assert params["target"] == str(int(table.loc[image, "target"]))


def test_a_path_outside_the_allowed_folders_is_refused(shortcut, tmp_path) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    at = opened(outside)
    assert [e.value for e in at.error] and "outside the folders this app may read" in at.error[0].value
    assert not at.dataframe  # no run is shown
    at = opened("")
    assert "Type the path of a run folder" in at.error[0].value


def test_the_html_report_names_the_classes(shortcut) -> None:
    run_dir, _ = shortcut
    at = opened(run_dir)
    report = made_report(at)
    assert report.startswith("<!DOCTYPE html>") and "marked" in report and "object" in report
    assert "data:image/png;base64," in report and "src=\"http" not in report  # self-contained
    assert "border shortcut?" in report


def test_a_run_with_a_damaged_part_opens_with_one_warning_on_what_is_missing(shortcut, tmp_path) -> None:
    import shutil

    from iba_core.runs.store import PARTS, part_names

    run_dir, keys = shortcut
    copy = run_dir.parent / "damaged_copy"  # inside the allowed folders; the module's run stays intact
    shutil.copytree(run_dir, copy)
    name = part_names(copy)[0]
    (copy / PARTS / f"{name}.parquet").write_bytes(b"PAR1 garbled")
    at = opened(copy)
    assert len(at.warning) == 1 and "1 part of this run is damaged" in at.warning[0].value
    assert "the next resume of the run redoes them" in at.warning[0].value
    assert len(table_images(at)) == len(open_run(copy).table["image"].unique()) < len(keys)




# ---- issue #28: the first screen leads with what stands out ----------------------------------------------------


def marked_images(keys: dict[str, bool]) -> set[str]:
    return {plain(k) for k, m in keys.items() if m}


def highlights_shown(at: AppTest) -> list[tuple[str, set[str]]]:
    """(title, images named) of each highlight on the page, in order: its bold title and the caption naming its
    images."""
    titles = [m.value.strip("*") for m in at.markdown if m.value.startswith("**") and m.value.endswith("**")]
    named = [c.value.split("Images: ", 1)[1].split(" (the first", 1)[0] for c in at.caption if "Images: " in c.value]
    return [(t, set(n.split(", "))) for t, n in zip(titles, named)]


def test_the_first_screen_names_the_marked_images_before_any_choice(shortcut) -> None:
    run_dir, keys = shortcut
    at = opened(run_dir)  # opened, no widget changed
    assert not at.error, [e.value for e in at.error]
    shown = highlights_shown(at)
    assert shown, "nothing stands out on the first screen"
    marked = marked_images(keys)
    # the first highlight is the fewest-bits group: exactly the marked images
    title, images = shown[0]
    assert "need very few bits" in title and images == marked
    # a flagged cluster of class "marked" names them too, though no class was chosen
    clusters = [(t, i) for t, i in shown if "cluster" in t]
    assert clusters and "marked" in clusters[0][0] and clusters[0][1] == marked
    # total bits is first-class: the table's flag column and the gallery's captions
    table = at.dataframe[0].value.set_index("image")
    assert set(table.index[table["needs_few_bits"]]) == {k for k, m in keys.items() if m}
    assert at.selectbox(key="ds_order").value == "total_bits"  # the gallery leads with the fewest bits too
    captions = [m.value for m in at.markdown if "[Per-Sample](" in m.value]
    assert sum("needs very few bits" in c for c in captions) == len(marked)
    # the class view opens on the class something stands out in
    assert at.selectbox(key="ds_class_iba_10").value == 0


def test_a_highlight_narrows_the_table_and_gallery_to_its_images(shortcut) -> None:
    run_dir, keys = shortcut
    at = opened(run_dir)
    at.button(key="ds_focus_0").click().run()
    assert_clean(at)
    assert table_images(at) == sorted(k for k, m in keys.items() if m)
    assert any("Showing only the images of" in i.value for i in at.info)
    at.button(key="ds_focus_clear").click().run()
    assert table_images(at) == sorted(keys)


def test_a_cluster_whose_maps_hold_almost_no_bits_is_dark_and_said_so(shortcut) -> None:
    from iba_core.app import dataset as ds
    from iba_core.app import dataset_classes
    from iba_core.app import dataset_gallery
    from iba_core.trust import Trust

    run_dir, keys = shortcut
    at = opened(run_dir)
    assert at.selectbox(key="ds_class_iba_10").value == 0  # class "marked": its maps hold a few bits each
    assert any("These maps hold almost no bits" in c.value for c in at.caption)
    run = open_run(run_dir)
    found = ds.highlights(run)
    marked = dataset_classes.class_view(run, "iba_10", 0, found.cluster_scale)
    other = dataset_classes.class_view(run, "iba_10", 1, found.cluster_scale)
    assert marked.cluster_scale == other.cluster_scale == pytest.approx(found.cluster_scale)
    # One scale for every class even where the run's largest mean and a class's differ by float rounding (they
    # are summed in other orders); a scale truly below a class's maps gives way to the class's own top.
    brightest = max(float(c.mean_map.max()) for c in [*marked.clusters, *other.clusters])
    for given in (brightest * (1 - 1e-6), brightest * 0.5):
        scales = {dataset_classes.class_view(run, "iba_10", t, given).cluster_scale for t in (0, 1)}
        assert scales == {given} if given > 0.9 * brightest else brightest in scales, (given, scales)
    assert all(c.near_zero for c in marked.clusters) and not any(c.near_zero for c in other.clusters)
    # on the common bits scale the near-empty cluster is dark, not a saturated square
    assert max(float(c.mean_map.max()) for c in marked.clusters) < 0.2 * marked.cluster_scale
    # its members show their maps over the images, not the photos alone
    row = marked.clusters[0].members.iloc[0]
    trust = Trust.local()
    overlay = dataset_gallery.image_thumbnail(run, row, trust)
    photo = dataset_gallery.network_crop(run, row, trust)
    import io

    import numpy as np
    from PIL import Image

    picture = np.asarray(Image.open(io.BytesIO(overlay)).convert("RGB"), dtype=float)
    plain_photo = np.asarray(photo.resize(picture.shape[1::-1], Image.Resampling.BILINEAR), dtype=float)
    assert np.abs(picture - plain_photo).mean() > 5


def test_the_report_leads_with_what_stands_out(shortcut) -> None:
    run_dir, keys = shortcut
    at = opened(run_dir)
    report = made_report(at)
    first, rest = report.split("<h2>Classes", 1)
    assert '<h2 id="stands-out">What stands out</h2>' in first and "need very few bits" in first
    for image in (k for k, m in keys.items() if m):
        assert image in first  # each marked image is named (and drawn) among the highlights
    assert "almost no bits" in rest and "<td>layer</td><td>features.3</td>" in first


def test_the_report_command_writes_the_same_report(shortcut, tmp_path, capsys) -> None:
    import json

    from iba_core.cli import main

    run_dir, keys = shortcut
    out = tmp_path / "report.html"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    line = json.loads(capsys.readouterr().out.strip())
    assert line["method"] == "iba_10" and "need very few bits" in line["stands_out"][0]
    html = out.read_text(encoding="utf-8")
    first = html.split("<h2>Classes", 1)[0]
    assert "need very few bits" in first and all(k in first for k, m in keys.items() if m)
    assert not any(k in first for k, m in keys.items() if not m)  # the clean images do not stand out


def test_a_damaged_run_file_is_said_in_words(shortcut) -> None:
    import shutil

    run_dir, _ = shortcut
    copy = run_dir.parent / "damaged_run_json"
    shutil.copytree(run_dir, copy)
    (copy / "run.json").write_text('{"format": 1, "network": "card:ti')  # cut short
    at = opened(copy)
    assert len(at.error) == 1 and "is damaged" in at.error[0].value
    assert "JSONDecodeError" not in at.error[0].value and "Error)" not in at.error[0].value


def test_a_run_without_a_bottleneck_names_no_layer_and_still_leads_with_what_it_checked(shortcut) -> None:
    from run_fixtures import load_card

    from iba_core.methods import get_method
    from iba_core.runs import finish_run, list_images, run_folder

    run_dir, keys = shortcut
    root = run_dir.parent
    network = load_card(root / "card" / "tiny.toml")
    top, items = list_images(root / "data", class_index=network.class_index)
    other = root / "saliency_run"
    run_folder(network, items, [get_method("saliency")], other, root=top)
    finish_run(other)
    at = opened(other)
    assert not at.error, [e.value for e in at.error]
    line = next(c.value for c in at.caption if c.value.startswith("Run "))
    assert "None" not in line and "layer none \\(its methods read the whole network\\)" in line
    assert any(h.value == "What stands out" for h in at.subheader)
    table = at.dataframe[0].value
    assert not table["needs_few_bits"].any()  # saliency maps have no bits to be few
    report = made_report(at)
    assert "<td>layer</td><td>none (the method reads the whole network)</td>" in report and ">None<" not in report


def test_opening_a_run_folds_the_start_form_and_the_table_says_seconds_are_per_image(shortcut) -> None:
    """A start form left open (the user started a run from it) folds when a run is opened, so the run's first
    screen is not pushed down; the table leaves out a measure no row has (box_share without boxes) and its
    seconds column says it is per image."""
    run_dir, _ = shortcut
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/dataset.py")
    at.session_state["ds_start_open"] = True
    at.run()
    assert at.session_state["ds_start_open"] is True
    at.text_input(key="ds_path").input(str(run_dir))
    at.button(key="ds_open_button").click().run()
    assert_clean(at)
    assert at.session_state["ds_start_open"] is False
    table = at.dataframe[0]
    assert "box_share" not in table.value.columns and "seconds" in table.value.columns
    assert "per image" in str(table.proto).lower()
