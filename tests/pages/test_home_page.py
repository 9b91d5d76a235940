"""Home page and navigation."""
from __future__ import annotations

from pathlib import Path

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
    links = {link.proto.page for link in app.get("page_link")}
    assert any("per_sample" in p for p in links) and any("beta_layer" in p for p in links)


def test_home_example_is_shown_and_small(app: AppTest) -> None:
    png = ASSETS / "home_example.png"
    assert png.is_file() and png.stat().st_size < 200_000
    assert app.image, "the precomputed example picture should be on the Home page"
    assert any(m.label == "Information used" and "bits" in m.value for m in app.metric)


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
