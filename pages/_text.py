"""Text that came from a file or a visitor, made safe to show inside the pages' Markdown."""
from __future__ import annotations

# ---- text from users ---------------------------------------------------------------------------

#: Markdown's special characters, and ':' (Streamlit's `:color[…]`, `:material/…:` and GFM's bare
#: http:// links need it).
MARKDOWN_SPECIAL = frozenset("\\`*_[]()#+-!<>|~$:")


def plain(text: object) -> str:
    """`text` (a card's title, a class name, a file name: anything a user chose) safe inside the Markdown of
    st.markdown, st.caption, st.info… and widget labels: every Markdown character escaped and line breaks made
    spaces, so it shows as typed and never as a link, an image, a heading or formatting."""
    return "".join("\\" + c if c in MARKDOWN_SPECIAL else c for c in " ".join(str(text).splitlines()))
