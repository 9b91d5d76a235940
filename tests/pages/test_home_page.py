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
