"""The frame every page shares: entry through app.py, presentation mode, scrolling, what the owner allows,
choices kept across pages, the session's map cache and its name for the background runs it starts (not a page
itself: app.py lists the pages)."""
from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import streamlit as st

from iba_core.app.maps import MapCache
from iba_core.settings import max_request_passes
from iba_core.trust import Trust, is_local_address


#: The image radio's choices (kept across pages; a link presets them).
SOURCES = ("Sample photo", "Upload")


#: The entry script, which lists the pages.
APP_SCRIPT = Path(__file__).resolve().parents[2] / "app.py"  # pages/widgets/page.py: two folders up
#: Set by app.py just before it runs the chosen page (see `through_app`).
VIA_APP_KEY = "_via_app"


# ---- entry -------------------------------------------------------------------------------------


def through_app() -> None:
    """Make sure this run goes through app.py's st.navigation; every page calls it first.

    Until st.navigation is first called in a process, Streamlit treats a `pages/` folder next to the entry
    script as an old-style multipage app: on a fresh server (and in every AppTest run), a link straight to a
    page (e.g. /per_sample) runs that file alone, without app.py, with every file of the folder in the
    sidebar. Then this runs app.py in place: its st.navigation switches that mode off for good and runs the
    same page (same URL path) inside it; this outer run then stops. Widget values and button clicks of the
    run are kept (a rerun would drop the clicks).
    """
    if st.session_state.pop(VIA_APP_KEY, False):
        return
    runpy.run_path(str(APP_SCRIPT), run_name="__main__")
    st.stop()


#: The sidebar's "Presentation mode" toggle (app.py draws it for every page), kept in st.session_state.
PRESENTATION_KEY = "presentation"
#: The page's root font size in presentation mode (Streamlit's default is 16 px). Streamlit sizes its text in
#: rem, so this one rule enlarges all of it, sidebar included; Plotly figures size their text in px and take
#: a zoom of their own (the β × layer grid: `iba_core.render.figures.PRESENTATION_ZOOM`).
PRESENTATION_FONT_PX = 21
#: Presentation mode's style: the root font size; the page's margins, which are in rem and would grow with it,
#: kept to what a projector needs (the content, e.g. the β × layer grid, gets the width and the first screen);
#: the open sidebar a little wider, since its width is in px while its text grows (page names were cut off).
PRESENTATION_CSS = (
    f"html {{ font-size: {PRESENTATION_FONT_PX}px; }} "
    '[data-testid="stMainBlockContainer"] { padding-left: 1.5rem; padding-right: 1.5rem; padding-top: 4rem; } '
    '[data-testid="stSidebar"][data-collapsed="false"] { min-width: 350px; } '
    # larger text in the same columns: metric labels wrap instead of ending in "…"
    '[data-testid="stMetricLabel"], [data-testid="stMetricLabel"] * { white-space: normal !important; '
    'overflow: visible !important; text-overflow: clip !important; }'
)


def presentation_toggle() -> bool:
    """The sidebar's Presentation mode toggle (larger text and maps for a projector); when on, one style rule
    on the root element raises the page's base font size. Returns whether it is on."""
    on = st.sidebar.toggle("Presentation mode", key=PRESENTATION_KEY,
                           help="Larger text on every page, and larger maps where a page draws them (the β × "
                                "layer grid), for a projector in a lecture hall. Collapse the sidebar (« at its "
                                "top) to give the maps the whole width.")
    if on:  # the root font size (everything in rem follows), the page's margins and the sidebar's width
        st.html(f"<style>{PRESENTATION_CSS}</style>")
    return on


def presentation() -> bool:
    """Whether presentation mode is on (the sidebar's toggle)."""
    return bool(st.session_state.get(PRESENTATION_KEY, False))


# ---- page position -----------------------------------------------------------------------------


def bring_into_view(key: str, top_share: float = 0.4) -> None:
    """Scroll the page so that the container made with `key` (st.container(key=…)) starts near the top of
    the window, unless its top is in view already (within the upper `top_share` of the window).

    For views that appear above the control that started them (a live run above its Run button).
    Runs a line of JavaScript in the page (st.html); it takes no space.
    """
    selector = json.dumps(f".st-key-{key}")
    st.html(
        "<script>(() => {"
        f"const el = document.querySelector({selector}); if (!el) return;"
        "const top = el.getBoundingClientRect().top;"
        f"if (top < 56 || top > window.innerHeight * {top_share:g}) {{"
        "el.style.scrollMarginTop = '4rem'; el.scrollIntoView({block: 'start'}); }"
        "})();</script>",
        unsafe_allow_javascript=True,
    )


# ---- what the owner allows ---------------------------------------------------------------------


def app_trust() -> Trust:
    """What this app's owner allows (IBA_TRUST_CODE, IBA_DATA_DIRS); paths on the server typed by a visitor
    anywhere only when the server listens on this machine alone (its visitor is its owner)."""
    return Trust.for_app(localhost=is_local_address(st.get_option("server.address")))


def request_budget() -> int | None:
    """The most network passes one request may cost here (`settings.max_request_passes`): none in an app that
    listens on this machine alone, unless its owner sets one."""
    return max_request_passes(localhost=is_local_address(st.get_option("server.address")))


# ---- widget state that survives page switches ---------------------------------------------------


def _kept_key(key: str) -> str:
    return f"_keep_{key}"


def kept_choice(key: str, default: Any = None) -> Any:
    """The choice kept for every page under `key` (`keep_choice`), else `default`."""
    return st.session_state.get(_kept_key(key), default)


def keep_choice(key: str, value: Any) -> None:
    """Keep `value` as the choice for every page under `key`: the widget made with that key takes it when a page
    next draws it (`restore_choice`), e.g. the network a link or a new card names."""
    st.session_state[_kept_key(key)] = value


def forget_choice(key: str) -> None:
    """Drop the choice kept under `key`: the widget falls back to its own state or default."""
    st.session_state.pop(_kept_key(key), None)


def restore_choice(key: str, default: Any) -> None:
    """Give the widget the last choice made on any page (called before the widget is created).

    Widget state belongs to the page that showed the widget; our own copy carries it across pages.
    """
    st.session_state[key] = kept_choice(key, st.session_state.get(key, default))


def remember_choice(key: str) -> None:
    """Keep the widget's choice for every page (a widget's on_change)."""
    keep_choice(key, st.session_state[key])


# ---- results kept across reruns ----------------------------------------------------------------


#: One attribution-map cache per browser session, shared by the Compare and Evaluate pages, so a map
#: computed on one page is reused on the other.
MAP_CACHE_KEY = "map_cache"
#: This browser session's name for the background runs it starts (`session_owner`).
OWNER_KEY = "_ds_owner"


def map_cache() -> MapCache:
    """This session's attribution-map cache."""
    return st.session_state.setdefault(MAP_CACHE_KEY, MapCache())


def session_owner() -> str:
    """This browser session's name for the background runs it starts (a folder run, concept discovery): its own
    run shows as progress, another session's as a polite refusal."""
    import uuid

    return st.session_state.setdefault(OWNER_KEY, uuid.uuid4().hex)
