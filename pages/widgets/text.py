"""Text that came from a file or a visitor, made safe to show inside the pages' Markdown."""
from __future__ import annotations

import re

from iba_core.render.text import isolated

#: Markdown's special characters, and ':' (Streamlit's `:color[…]` and `:material/…:` need it).
MARKDOWN_SPECIAL = frozenset("\\`*_[]()#+-!<>|~$:")
#: An invisible character that joins its neighbours (U+2060 WORD JOINER): put inside what GFM would link.
WORD_JOINER = "\u2060"
#: Where GFM's literal autolinks start: `http://`, `https://`, `www.`, and an e-mail address's `@` (also behind
#: `mailto:`). Streamlit's Markdown links these even when every character is escaped (the escapes are gone by
#: the time the links are looked for), so a word joiner goes between the letters and the ':', '.' or '@'.
_AUTOLINK_STARTS = re.compile(r"(?i)(?<=https)(?=:)|(?<=http)(?=:)|(?<=www)(?=\.)|(?=@)")


def plain(text: object) -> str:
    """`text` (a card's title, a class name, a file name: anything a user or a file chose) safe inside the
    Markdown of st.markdown, st.caption, st.info… and widget labels: every Markdown character escaped, line
    breaks made spaces, a word joiner inside URLs and e-mail addresses, and a bidi isolate around it where it
    could reorder what follows (`isolated`), so it shows as typed (the joiner is invisible) and never as a link,
    an image, a heading or formatting, nor turns the numbers after it around."""
    one_line = _AUTOLINK_STARTS.sub(WORD_JOINER, isolated(" ".join(str(text).splitlines())))
    return "".join("\\" + c if c in MARKDOWN_SPECIAL else c for c in one_line)
