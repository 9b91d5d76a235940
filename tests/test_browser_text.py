"""Text from data renders as text, in a real browser (issue #27, point 2): a visitor's model card whose class
names (and title) are URLs and e-mail addresses is opened on the Per-Sample page in Chromium; the names show as
typed in the class radio, the top-prediction caption and the statistics warning, and the page holds no link to
them (Streamlit's Markdown links bare URLs, `www.` and e-mail addresses even when every character is escaped)."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from browser_helpers import chromium_page, streamlit_server

sys.path.insert(0, str(Path(__file__).resolve().parent / "networks"))
from card_fixtures import make_resnet18, write_card  # noqa: E402

from pages.widgets.text import WORD_JOINER  # noqa: E402

#: Seven outputs, each a way GFM would link a bare text (the last two only with another text around them).
URL_CLASSES = ["http://evil.example", "https://evil.example/login?next=1", "www.evil.example", "mail@evil.example",
               "HTTPS://EVIL.EXAMPLE", "see www.evil.example/x now", "write to me@evil.example"]
TITLE = "http://evil.example/title"
#: Lists every link's target and the visible text of the elements that hold the class names.
LINKS = "() => [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))"


def _url_card(models: Path) -> None:
    folder = models / "urls"
    folder.mkdir(parents=True)
    torch.save(make_resnet18(len(URL_CLASSES)).state_dict(), folder / "urls.pth")
    (folder / "classes.txt").write_text("\n".join(URL_CLASSES) + "\n", encoding="utf-8")
    write_card(folder, name="urls", weights="urls.pth", extra=f'title = "{TITLE}"\n')


def test_url_class_names_and_title_render_as_text_without_links(tmp_path: Path, monkeypatch) -> None:
    _url_card(tmp_path / "models")
    monkeypatch.setenv("IBA_MODELS_DIR", str(tmp_path / "models"))
    from playwright.sync_api import expect

    with streamlit_server(tmp_path) as url, chromium_page() as page:
        page.goto(f"{url}/per_sample?network=card:urls")
        expect(page.get_by_text("Top prediction")).to_be_visible()  # the card's network loaded, the image classified
        radio = page.locator('[data-testid="stRadio"]').filter(has_text="Class to explain")
        options = radio.locator('[role="radiogroup"] label')  # the options, not the widget's own label
        expect(options).to_have_count(5)
        shown = [text.replace(WORD_JOINER, "").split(" · ")[0] for text in options.all_inner_texts()]
        assert len(set(shown)) == 5 and set(shown) <= set(URL_CLASSES), shown  # as typed, nothing lost
        caption = page.get_by_text("Top prediction").inner_text().replace(WORD_JOINER, "")
        assert any(f"Top prediction: {name} (" in caption for name in shown), caption
        warning = page.locator('[data-testid="stAlertContentWarning"]').filter(has_text="statistics")
        expect(warning.first).to_be_visible()  # it starts with the card's title, a URL
        assert TITLE in warning.first.inner_text().replace(WORD_JOINER, "")

        links = page.evaluate(LINKS)
        assert not [href for href in links if "evil" in href.lower()], links
        assert page.locator('[data-testid="stException"]').count() == 0
