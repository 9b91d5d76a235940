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
