"""The Dataset page's planted-mark self-test (issue #42, item 2) through AppTest: a tiny test (four noise photos, a
large red patch, Saliency, the offline network) shows the library's verdict, the reaction's figures, one ranking row
per method and target, the example copies and the clean and marked runs compared; a test folder outside the allowed
folders is refused in one sentence before anything runs."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from page_helpers import assert_clean

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import write_noise_images  # noqa: E402

from iba_core.selftest import open_self_test  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "app.py"
TIMEOUT = 300


@pytest.fixture(scope="module")
def data_root(tmp_path_factory) -> Path:
    """A folder the app may read (IBA_DATA_DIRS) holding 6 noise photos."""
    root = tmp_path_factory.mktemp("selftest_page")
    write_noise_images(root / "images", 6)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IBA_DATA_DIRS", str(root))
        yield root


def self_tested(source: Path, out: Path) -> AppTest:
    """The Dataset page with a self-test of a 0.75-wide red patch, Saliency, 4 images of `source` into `out`."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/dataset.py").run()
    assert_clean(at)
    at.text_input(key="ds_st_source").input(str(source))
    at.text_input(key="ds_st_out").input(str(out))
    at.number_input(key="ds_st_size_patch").set_value(0.75)
    at.multiselect(key="ds_st_methods").set_value(["saliency"])
    at.number_input(key="ds_st_sample").set_value(4)
    at.button(key="ds_st_button").click().run()
    assert_clean(at)
    return at


def test_a_tiny_self_test_shows_the_verdict_the_ranking_and_the_paired_view(data_root) -> None:
    at = self_tested(data_root / "images", data_root / "selftest")
    assert not at.error, [e.value for e in at.error]
    result = open_self_test(data_root / "selftest")  # what the library wrote
    verdict = result.reaction.verdict
    shown = [m.value.replace("\\", "") for m in (*at.success, *at.warning)]  # unescaped
    assert any(verdict[1:] in s for s in shown), (verdict, shown)
    assert (result.reaction.reacts and at.success) or (not result.reaction.reacts and not at.success)
    assert [m.label.replace("\\", "") for m in at.metric][:1] == ["p(own class)"]
    ranking = next(d.value for d in at.dataframe if "localisation_ratio" in d.value.columns)
    assert len(ranking) == len(result.scores) >= 1 and set(ranking["method"]) == {"Saliency"}
    assert ranking["localisation_ratio"].tolist() == pytest.approx(
        [s.localisation_ratio for s in result.scores], nan_ok=True)
    assert ranking["rank"].notna().all() == bool(result.ranking)  # ranked where the model reacts
    captions = [c for im in at.image for c in im.captions]
    assert "clean copy" in captions and "marked copy" in captions
    assert any(i.value.startswith("4 images matched · 0 only in A · 0 only in B") for i in at.info)
    assert at.selectbox(key="ds_st_paired").value == ("saliency", result.scores[0].target)


def test_a_test_folder_outside_the_allowed_ones_is_refused(data_root, tmp_path) -> None:
    at = self_tested(data_root / "images", tmp_path / "elsewhere")
    assert [e.value for e in at.error] and "outside the folders this app may read" in at.error[0].value
    assert "ds_st_result" not in at.session_state
    assert not (tmp_path / "elsewhere").exists()


def test_the_sample_can_be_cleared_for_every_image_and_the_budget_counts_four_runs(data_root, monkeypatch) -> None:
    """The sample box proposes 16 images and can be cleared ("every image"): the six photos then cost four runs each
    (clean and marked, own class and pushed class) of Saliency's 2 passes, 48, refused above a budget of 40 that
    two runs (24) would pass."""
    monkeypatch.setenv("IBA_MAX_REQUEST_PASSES", "40")
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    at.switch_page("pages/dataset.py").run()
    assert at.number_input(key="ds_st_sample").value == 16  # the proposal for a served room
    at.text_input(key="ds_st_source").input(str(data_root / "images"))
    at.text_input(key="ds_st_out").input(str(data_root / "st-every"))
    at.multiselect(key="ds_st_methods").set_value(["saliency"])
    at.number_input(key="ds_st_sample").set_value(None)
    at.button(key="ds_st_button").click().run()
    assert at.number_input(key="ds_st_sample").value is None
    errors = [e.value for e in at.error]
    assert errors and "A self-test of 6 images (4 runs of each" in errors[0] and "limit of 40 passes" in errors[0]
    assert not (data_root / "st-every").exists() and "ds_st_result" not in at.session_state
