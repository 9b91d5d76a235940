"""Numbers as the short texts the pages and figures show."""
from __future__ import annotations


def format_probability(p: float) -> str:
    """0.355 → '35.5 %'; tiny values keep two significant digits."""
    pct = 100.0 * p
    return f"{pct:.1f} %" if pct >= 0.1 else f"{pct:.2g} %"


#: The head whose "probabilities" are cosine similarities (`heads.SIMILARITY`, a CLIP model's).
SIMILARITY_HEAD = "similarity"


def target_score_name(head: str = "softmax") -> str:
    """What the explained output is called: "p(target)", or "similarity" for a CLIP model's similarity head."""
    return "similarity" if head == SIMILARITY_HEAD else "p(target)"


def format_target_score(value: float, head: str = "softmax") -> str:
    """The explained output's value as the pages and frames write it: 0.42 → '42.0 %' (a probability), or
    '0.420' for the similarity head (a cosine, −1…1, never shown as a percentage)."""
    return f"{value:.3f}" if head == SIMILARITY_HEAD else format_probability(value)


def format_beta(beta_k: float) -> str:
    """β·k as typed: 10.0 → '10', 0.01 → '0.01'."""
    return f"{beta_k:g}"


def format_seconds(seconds: float) -> str:
    """0.25 → '250 ms', 12.3 → '12.3 s', 90 → '1.5 min'."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"



def count_of(n: int, noun: str, plural: str | None = None) -> str:
    """"1 image", "3 images": a count with its noun in the right number."""
    return f"{n:,} {noun if n == 1 else (plural or noun + 's')}"


# ---- names a user or a file chose, shown as written ---------------------------------------------------

#: Unicode's bidirectional isolate around a shown name: FIRST STRONG ISOLATE … POP DIRECTIONAL ISOLATE.
ISOLATE_START, ISOLATE_END = "\u2068", "\u2069"
#: Bidi controls that open an embedding or override (closed by PDF) and an isolate (closed by PDI).
_OPEN_EMBEDDING, _CLOSE_EMBEDDING = frozenset("\u202a\u202b\u202d\u202e"), "\u202c"
_OPEN_ISOLATE, _CLOSE_ISOLATE = frozenset("\u2066\u2067\u2068"), "\u2069"
#: The categories of characters that show nothing themselves: controls, format characters, line and paragraph
#: separators (ordinary spaces are Zs, not among them).
INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})


def invisible_characters(name: object) -> list[str]:
    """The distinct invisible characters of `name` (categories Cc, Cf, Zl, Zp), in order of first appearance."""
    import unicodedata

    return list(dict.fromkeys(c for c in str(name) if unicodedata.category(c) in INVISIBLE_CATEGORIES))


def character_name(c: str) -> str:
    """'U+202E (right-to-left override)': a character's code point and Unicode name (a control's is its code)."""
    import unicodedata

    name = unicodedata.name(c, "")
    return f"U+{ord(c):04X} ({name.lower() if name else 'a control character'})"


def invisible_note(name: object) -> str:
    """What a name's invisible characters are, in a few words ('holds an invisible character: U+202E
    (right-to-left override)'), or '' when it holds none: a name whose text cannot show what it holds says so."""
    found = invisible_characters(name)
    if not found:
        return ""
    listed = ", ".join(character_name(c) for c in found[:4]) + (", …" if len(found) > 4 else "")
    return f"holds {'an invisible character' if len(found) == 1 else 'invisible characters'}: {listed}"


def _balanced(text: str) -> str:
    """`text` with its bidi controls paired: a closer with no opener dropped (a stray PDI would end the isolate
    around the name early), every opener left open closed at the end, so no direction leaks past the name."""
    import unicodedata

    out, open_ = [], []  # open_: the closers owed, innermost last
    for c in text:
        if c in _OPEN_EMBEDDING or c in _OPEN_ISOLATE:
            open_.append(_CLOSE_EMBEDDING if c in _OPEN_EMBEDDING else _CLOSE_ISOLATE)
        elif c == _CLOSE_EMBEDDING:
            # a PDF closes the innermost embedding, never across an isolate (UAX #9)
            if not open_ or open_[-1] != _CLOSE_EMBEDDING:
                continue
            open_.pop()
        elif c == _CLOSE_ISOLATE:
            if _CLOSE_ISOLATE not in open_:
                continue
            while open_.pop() != _CLOSE_ISOLATE:  # a PDI closes the embeddings opened inside its isolate too
                out.append(_CLOSE_EMBEDDING)
        elif unicodedata.category(c) in ("Cc", "Zl", "Zp"):
            c = " "  # a line break or a terminal's control would break the line or act: one line, a space
        out.append(c)
    return "".join(out) + "".join(reversed(open_))


#: Bidi classes that cannot move the text around a name in a left-to-right line (Latin letters, European digits,
#: punctuation, spaces): a name made of these alone needs no isolate and is shown unchanged.
_LEFT_TO_RIGHT_SAFE = frozenset({"L", "EN", "ES", "ET", "CS", "NSM", "BN", "WS", "ON"})


def isolated(text: object) -> str:
    """`text` on one line (controls and line breaks as spaces), its bidi controls paired, and inside a bidi
    isolate (FSI … PDI) when it holds anything that could reorder the text after it (a right-to-left override,
    right-to-left letters, Arabic digits); plain left-to-right text comes back unchanged."""
    import unicodedata

    body = _balanced(str(text))
    if all(unicodedata.bidirectional(c) in _LEFT_TO_RIGHT_SAFE for c in body):
        return body
    return ISOLATE_START + body + ISOLATE_END


def shown_name(name: object, note: bool = True) -> str:
    """`name` (a file, folder, run, class, card, prompt or method name a user or a file chose) as every page,
    caption and report shows it: `isolated`, so "5.7 bits" after it still reads "5.7 bits", and (with `note`)
    what its invisible characters are, in brackets after it. A plain name comes back unchanged."""
    said = invisible_note(name) if note else ""
    return f"{isolated(name)} [{said}]" if said else isolated(name)
