"""A user's mistake and a bug look different in the app (issue #26, point 5): the mistake shows its one sentence;
a bug (any error that is not a `UserError`, such as a ValueError raised inside the library) shows as an internal
error with a reference and where the log is, and its traceback is in that log (`iba_core.app.error_log`)."""
from __future__ import annotations

import re
from pathlib import Path

from streamlit.testing.v1 import AppTest

from iba_core.app import dataset as ds
from iba_core.app.error_log import SERVED_LOG_PLACE, app_log_file, log_internal_error
from iba_core.trust import Trust

INTERNAL = re.compile(r"^Internal error in IBA Explorer \((\w+), reference ([0-9a-f]{8})\): this is a bug, not a "
                      r"mistake of yours; the details are in (.+)\.$")


def _errors(at: AppTest) -> list[str]:
    assert not at.exception, [e.value for e in at.exception]  # never a traceback on the page
    return [e.value for e in at.error]


def _open_run(at: AppTest, path: Path) -> list[str]:
    at.text_input(key="ds_path").input(str(path))
    at.button(key="ds_open_button").click().run()
    return _errors(at)


def _logged(reference: str) -> str:
    """The log's record of the internal error with this reference (its line and the traceback below it)."""
    text = app_log_file().read_text(encoding="utf-8")
    assert f"Internal error, reference {reference}" in text, text[-2000:]
    return text[text.index(f"Internal error, reference {reference}"):]


def test_a_mistake_shows_its_sentence_and_a_bug_in_the_library_an_internal_error_that_is_logged(
        open_page, monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("IBA_DATA_DIRS", str(tmp_path))  # a served app (AppTest listens on no loopback address)
    at = open_page("dataset")
    mistake = _open_run(at, tmp_path / "no_such_run")
    assert len(mistake) == 1 and not mistake[0].startswith("Internal error"), mistake
    assert "no_such_run" in mistake[0]  # says which folder, in the user's words

    def broken(path, trust):
        raise ValueError("index 7 is out of bounds for axis 0 with size 7")

    monkeypatch.setattr(ds, "open_run_folder", broken)
    shown = _open_run(at, tmp_path)
    assert len(shown) == 1, shown
    match = INTERNAL.match(shown[0])
    assert match, shown[0]
    kind, reference, place = match.groups()
    # issue #40, item 5: a visitor hears of "the app's error log" and the reference, never the server's paths
    assert kind == "ValueError" and place == SERVED_LOG_PLACE
    assert str(app_log_file()) not in shown[0] and str(tmp_path) not in shown[0] and "/tmp" not in shown[0]
    assert "out of bounds" not in shown[0]  # the bug's own words go to the log, not to the visitor
    record = _logged(reference)
    assert "Traceback (most recent call last)" in record and "in broken" in record
    assert "ValueError: index 7 is out of bounds for axis 0 with size 7" in record


def test_a_network_that_fails_to_load_with_a_bug_says_internal_error(open_page, monkeypatch) -> None:
    import pages.widgets.network_picker as picker

    def broken(key, trust=None):
        raise TypeError("'NoneType' object is not subscriptable")

    picker.shared_model.clear()  # (the network of another test may be cached: this load must run)
    monkeypatch.setattr(picker, "load_shared", broken)
    try:
        at = open_page("per_sample")
        shown = _errors(at)
        assert len(shown) == 1 and INTERNAL.match(shown[0]), shown
        assert INTERNAL.match(shown[0]).group(1) == "TypeError"
        assert "in broken" in _logged(INTERNAL.match(shown[0]).group(2))
    finally:
        picker.shared_model.clear()  # no other test gets this failure (failures are not cached anyway)


def test_the_machine_s_own_user_is_told_where_the_log_is() -> None:
    """The local user (server paths anywhere: an app on this machine only, or the command line) still sees the
    log's path; a served visitor (any other trust) and a caller that names none do not."""
    served = Trust(server_paths=(Path("/srv/data"),))
    local = INTERNAL.match(log_internal_error(ValueError("x"), Trust.local())).group(3)
    assert local == f"the log at {app_log_file()}" and Path(local.removeprefix("the log at ")) == app_log_file()
    assert INTERNAL.match(log_internal_error(ValueError("x"), served)).group(3) == SERVED_LOG_PLACE
    assert INTERNAL.match(log_internal_error(ValueError("x"))).group(3) == SERVED_LOG_PLACE
