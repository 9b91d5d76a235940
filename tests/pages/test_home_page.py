"""Home page and navigation."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from streamlit.testing.v1 import AppTest

from page_helpers import assert_clean

ASSETS = Path(__file__).resolve().parents[2] / "assets"


def test_home_explains_bits_and_links_the_pages(app: AppTest) -> None:
    assert_clean(app)
    assert app.title[0].value == "IBA Explorer"
    text = " ".join(md.value for md in app.markdown)
    assert "bits" in text and "not to be needed" in text
    # The guarantee as the paper gives it: zero bits only, only for the prediction through the bottleneck.
    assert "zero bits" in text and "prediction made through the bottleneck" in text and "few bits" in text
    captions = " ".join(c.value for c in app.caption)
    assert "that are not needed" not in captions
    # bits compare within one setting, not "across images, regions and networks" (issue #29.7)
    assert "networks" not in text.split("What bits compare")[0]
    assert "one network at one layer, with one β and one set of feature statistics" in " ".join(text.split())
    assert "another seed" in text
    links = {link.proto.page for link in app.get("page_link")}
    assert any("per_sample" in p for p in links) and any("beta_layer" in p for p in links)


def test_home_example_is_shown_and_small(app: AppTest) -> None:
    png = ASSETS / "home_example.png"
    assert png.is_file() and png.stat().st_size < 200_000
    assert app.image, "the precomputed example picture should be on the Home page"
    assert any(m.label == "Information used" and "bits" in m.value for m in app.metric)


def test_home_example_gives_the_seed_spread_of_its_total_bits(app: AppTest) -> None:
    """The spread comes from the shipped example (scripts/make_home_example.py fits seeds 0–4), not from a
    number of the page's own."""
    import json

    spread = json.loads((ASSETS / "home_example.json").read_text(encoding="utf-8"))["seed_spread"]
    assert spread["seeds"] == [0, 1, 2, 3, 4] and len(spread["total_bits"]) == 5
    assert spread["mean"] == pytest.approx(np.mean(spread["total_bits"]), abs=0.1)
    assert spread["sd"] == pytest.approx(np.std(spread["total_bits"], ddof=1), abs=0.1)
    captions = " ".join(c.value for c in app.caption)
    assert f"Seeds 0–4 give {spread['mean']:,.0f} ± {spread['sd']:,.0f} bits" in captions


def test_every_page_renders_without_error(app: AppTest) -> None:
    for page in ("pages/per_sample.py", "pages/beta_layer.py", "pages/home.py"):
        app.switch_page(page).run()
        assert_clean(app)
        assert not app.error, (page, [e.value for e in app.error])


def test_home_numbers_come_from_the_shipped_example(app: AppTest) -> None:
    """The Home page shows the numbers of assets/home_example.json (written by scripts/make_home_example.py,
    checked against a fresh run by tests/test_examples.py), not numbers of its own."""
    import json

    from iba_core.render.text import format_probability

    res = json.loads((ASSETS / "home_example.json").read_text(encoding="utf-8"))["results"]
    shown = [m.value for m in app.metric]
    assert any(f"{res['total_bits']:,.0f}" in value for value in shown)
    assert format_probability(res["p_target_without_bottleneck"]) in shown
    assert format_probability(res["p_target_with_bottleneck"]) in shown
