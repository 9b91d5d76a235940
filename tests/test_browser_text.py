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


# ---- names in a bidi isolate (issue #40, item 4) ----------------------------------------------------------

#: The left edge, on the screen, of each character of the first text node of `#line` (one rectangle per character).
CHARACTER_XS = """
() => {
  const node = document.getElementById('line').firstChild, xs = [];
  for (let i = 0; i < node.length; i++) {
    const range = document.createRange(); range.setStart(node, i); range.setEnd(node, i + 1);
    const rect = range.getBoundingClientRect(); xs.push(rect.width > 0 ? rect.left : null);
  }
  return xs;
}
"""


def _reads_in_order(page, caption: str, part: str) -> bool:
    """Whether Chromium draws `part` of `caption` left to right (each of its characters right of the one before)."""
    import html

    page.set_content(f'<html><body><p id="line" style="font: 16px sans-serif">{html.escape(caption)}</p></body>'
                     "</html>")
    xs = page.evaluate(CHARACTER_XS)
    start = caption.index(part)
    drawn = [x for x in xs[start:start + len(part)] if x is not None]
    return all(a < b for a, b in zip(drawn, drawn[1:]))


def test_the_numbers_after_a_right_to_left_override_read_in_order_in_chromium() -> None:
    """The gallery's caption, as the page and the report draw it: with the file name in an isolate the bits and the
    border share after it read left to right; without (the caption before the fix) Chromium turns them around."""
    import pandas as pd

    from iba_core.app.dataset_gallery import cell_caption

    name = "photo\u202egpj.png"
    row = pd.Series({"image": name, "class_name": "tench", "target": 0, "correct": True, "predicted_name": "tench",
                     "total_bits": 5.7, "border_share": 0.38})
    caption = cell_caption(row, "Per-Sample", bits=True)
    bare = f"{name} · tench · correct · Per-Sample · 5.7 bits · border 38%"  # no isolate, no note
    with chromium_page() as page:
        assert not _reads_in_order(page, bare, "5.7 bits · border 38%")  # the bug, as the issue saw it
        assert _reads_in_order(page, caption, "5.7 bits · border 38%")
        assert _reads_in_order(page, caption, "U+202E (right-to-left override)")
