"""pages/widgets/text.py: text from files and visitors made safe for the pages' Markdown (`plain`). The browser test
(tests/test_browser_text.py) checks that Chromium shows such text with no link; this checks the text itself."""
from __future__ import annotations

import re

import pytest

from pages.widgets.text import MARKDOWN_SPECIAL, WORD_JOINER, plain

#: What GFM's literal autolinks start with (http://, https://, www., an e-mail address), in any case.
AUTOLINK = re.compile(r"(?i)https?:|https?\\:|www\.|[\w.+-]@")


@pytest.mark.parametrize("text", ["http://evil.example", "HTTPS://EVIL.EXAMPLE/a?b=1", "www.evil.example",
                                  "mail@evil.example", "mailto:me@evil.example", "see https://x.y and www.z.w"])
def test_urls_and_addresses_are_broken_invisibly(text) -> None:
    safe = plain(text)
    assert not AUTOLINK.search(safe), safe
    unescaped = re.sub(r"\\(.)", r"\1", safe)
    assert unescaped.replace(WORD_JOINER, "") == text  # shown as typed: only the invisible joiner added


def test_markdown_is_escaped_and_ordinary_text_kept() -> None:
    assert plain("tabby, tabby cat") == "tabby, tabby cat"
    assert plain("**bold** [x](http://a.b)\nnext") == (
        "\\*\\*bold\\*\\* \\[x\\]\\(http" + WORD_JOINER + "\\://a.b\\) next")
    assert all(plain(c) == "\\" + c for c in MARKDOWN_SPECIAL)
