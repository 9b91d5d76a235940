"""The "where to change what" table, demonstrated: a method registered from a test-only module appears in
the CLI's compare and on the Compare page, with no file of the project touched."""
from __future__ import annotations

import json

import numpy as np
import pytest

import throwaway_method as throwaway
from page_helpers import assert_clean


@pytest.fixture
def registered():
    throwaway.register()
    yield throwaway.KEY
    throwaway.unregister()


def test_a_registered_method_runs_in_cli_compare(registered, tmp_path, capsys):
    from iba_core.cli import main
    from iba_core.images import load_sample

    image = tmp_path / "cat.png"
    load_sample("chelsea").save(image)
    out = tmp_path / "out"
    assert main(["compare", str(image), "--methods", f"saliency,{registered}", "--out", str(out)]) == 0
    values = np.load(out / f"{registered}.npy")
    assert values.shape == (224, 224) and np.ptp(values) > 0
    summary = json.loads((out / "summary.json").read_text())
    assert [m["key"] for m in summary["methods"]] == ["saliency", registered]
    assert summary["methods"][1]["name"] == throwaway.Brightness.name
    capsys.readouterr()
    with pytest.raises(SystemExit):  # its key is offered in the --methods help too
        main(["compare", "--help"])
    assert registered in capsys.readouterr().out


def test_unregistered_it_is_gone(tmp_path, capsys):
    from iba_core.cli import main
    from iba_core.methods import method_keys

    assert throwaway.KEY not in method_keys()
    assert main(["compare", str(tmp_path / "x.png"), "--methods", throwaway.KEY, "--out", str(tmp_path)]) == 1
    assert "Unknown attribution method" in capsys.readouterr().err


def test_a_registered_method_appears_on_the_compare_page(registered, open_page) -> None:
    at = open_page("compare")
    assert throwaway.Brightness.name in at.multiselect(key="cmp_methods").options  # offered by its name
    at.multiselect(key="cmp_methods").set_value([registered])
    at.selectbox(key="cmp_readout_efficientnet_lite0").set_value("—")
    at.button(key="cmp_run_button").click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    assert [k[4] for k in at.session_state["cmp_last"].keys] == [registered]
    assert any(throwaway.Brightness.name in c.value for c in at.caption)
