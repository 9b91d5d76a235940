"""Links that reopen a view (`iba_core.app.links`): the URL's query parameters read once a session, the widgets'
values written back, the "Link to this view" popover, and the note when a kept result is of another image."""
from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

import streamlit as st

from iba_core.app import links
from iba_core.app.models import TORCHVISION_CHOICE, find_cards
from iba_core.networks import Network
from iba_core.trust import Trust

from pages.widgets.page import SOURCES, keep_choice
from pages.widgets.text import plain

# ---- links that reopen a view (iba_core.app.links) ------------------------------------------------
# The session's first page with inputs reads its URL's query parameters: the image and the network are preset
# before their widgets, the layer, β·k and class when the form's widgets are made, the replay step when a run's
# replay is. Afterwards every widget writes its value back, so the address bar always holds this view's link.

#: Set once this session has read its URL's query parameters.
LINK_READ_KEY = "_link_read"
#: What the link asked for that widgets made later still take: (links.View, the network it was checked for).
LINK_PENDING_KEY = "_link_pending"
#: What of the link could not be used: one st.warning on the run that read it.
LINK_PROBLEMS_KEY = "_link_problems"
#: Digests of this session's uploads already kept for links.
KEPT_UPLOADS_KEY = "_kept_uploads"
#: The image (name, content digest) and network title chosen above the page's results now (None: none usable).
CHOSEN_KEY = "_chosen_subject"
#: The network key chosen in the menu (also one that does not load).
NETWORK_CHOICE_KEY = "_network_choice"


def read_link(trust: Trust) -> None:
    """Once a session: the view the URL's query parameters describe (`links.from_params`). The image and the
    network are preset here, before their widgets; the rest waits in LINK_PENDING_KEY."""
    if st.session_state.get(LINK_READ_KEY):
        return
    st.session_state[LINK_READ_KEY] = True
    params = st.query_params.to_dict()
    if not any(name in params for name in links.PARAMS):
        return
    cards = find_cards(trust=trust)
    view, problems = links.from_params(params, cards)
    if view.upload_digest is not None:
        kept = links.kept_upload(view.upload_digest)
        if kept is None:  # removed since from_params looked, or damaged
            problems.append(links.UPLOAD_GONE)
        else:
            keep_choice("image_source", SOURCES[1])
            keep_choice("upload", kept)
    elif view.image is not None:
        keep_choice("image_source", SOURCES[0])
        keep_choice("sample_name", view.image)
    if view.network is not None:
        option = links.network_option(view.network, cards)
        keep_choice("network", option)
        if option == TORCHVISION_CHOICE:
            keep_choice("tv_network", view.network[len(TORCHVISION_CHOICE):])
    # The address bar keeps only what was used: a refused value is not passed on by copying the link.
    others = {name: value for name, value in params.items() if name not in links.PARAMS}
    st.query_params.from_dict({**links.to_params(view), **others})
    st.session_state[LINK_PENDING_KEY] = (view, None)
    st.session_state[LINK_PROBLEMS_KEY] = problems


def fit_link(network: Network) -> links.View | None:
    """The link's pending view, its layer and class checked against `network` the first time one is loaded
    (`links.fit`); None when nothing is pending or it was checked for another network."""
    pending = st.session_state.get(LINK_PENDING_KEY)
    if pending is None:
        return None
    view, checked_for = pending
    if checked_for is None:
        view, problems = links.fit(view, network)
        st.session_state[LINK_PROBLEMS_KEY] = st.session_state.get(LINK_PROBLEMS_KEY, []) + problems
        st.session_state[LINK_PENDING_KEY] = (view, network.key)
        return view
    return view if checked_for == network.key else None


def take_from_link(network: Network | None, field: str) -> Any:
    """A value the link asked for that a widget about to be made takes (once), or None. network: the one the
    widget belongs to (the link's layer and class are for the network it was checked for); None for β·k."""
    pending = st.session_state.get(LINK_PENDING_KEY)
    view = fit_link(network) if network is not None else pending[0] if pending is not None else None
    value = getattr(view, field) if view is not None else None
    if value is not None:
        st.session_state[LINK_PENDING_KEY] = (replace(view, **{field: None}), pending[1] if network is None
                                              else network.key)
    return value


def linked_range(network: Network) -> tuple[str, str] | None:
    """The CoIBA layer range the link asks for on `network` (checked by `links.fit`), left for the range picker
    to take; None when it asks for none."""
    view = fit_link(network)
    return view.layer_range if view is not None else None


def set_link(**values: str | None) -> None:
    """Write these query parameters (None: remove one) where they differ from the address bar's."""
    now = st.query_params.to_dict()
    wanted = {**now, **values}
    ordered = {name: wanted[name] for name in links.PARAMS if wanted.get(name) is not None}
    ordered.update((name, value) for name, value in wanted.items() if name not in links.PARAMS)  # others kept
    if list(ordered.items()) != list(now.items()):  # (in links.PARAMS order: a link reads the same every time)
        st.query_params.from_dict(ordered)
        _show_link()


#: Where this run shows the link (an st.empty inside the "Link to this view" popover), and the note that a
#: link's replay step waits for a run.
LINK_SLOT_KEY, STEP_NOTE_KEY = "_link_slot", "_link_step_note"


def _show_link() -> None:
    """The address bar's link (this view's parameters only) in this run's LINK_SLOT_KEY slot, if any."""
    slot = st.session_state.get(LINK_SLOT_KEY)
    if slot is None:
        return
    params = st.query_params.to_dict()
    query = urlencode({name: params[name] for name in links.PARAMS if name in params}, safe=":")
    slot.code(f"{st.context.url or ''}?{query}", language=None, wrap_lines=True)


def link_section(pending_step: int | None) -> None:
    """The "Link to this view" popover (the address bar's link), and while a link's replay step waits for a run,
    a caption saying so."""
    with st.popover("Link to this view", icon=":material/link:"):
        st.caption("The address bar holds this view's link: the image (a sample photo, or an upload this server "
                   "keeps), the network, layer (or CoIBA's layer range), β·k, class and replay step. Bookmark or "
                   "share it; it opens the view with its settings, and Run makes the result.")
        st.session_state[LINK_SLOT_KEY] = st.empty()
        _show_link()
    if pending_step is not None:  # (emptied by `replay_step_key` once a run's replay takes the step)
        st.session_state[STEP_NOTE_KEY] = note = st.empty()
        note.caption(f"This link shows step {pending_step} of a run's replay. A link cannot hold the run itself: "
                     "its settings are set, press **Run**, and the replay opens at that step.")


def replay_step_key(key: str, steps: int) -> str:
    """`key` for the Per-Sample replay slider of a run of `steps` steps: a step a link asked for is set on it
    (at most `steps`), and the step shown goes into the link."""
    pending = st.session_state.get(LINK_PENDING_KEY)
    if pending is not None and pending[0].step is not None:
        st.session_state[key] = min(pending[0].step, steps)
        st.session_state[LINK_PENDING_KEY] = (replace(pending[0], step=None), pending[1])
        note = st.session_state.pop(STEP_NOTE_KEY, None)
        if note is not None:
            note.empty()
    set_link(step=str(st.session_state.get(key, steps)))
    return key


def keep_for_links(name: str, data: bytes, digest: str) -> None:
    """Keep an accepted upload on the server (`links.keep_upload`, once a session) so its link reopens it."""
    kept = st.session_state.setdefault(KEPT_UPLOADS_KEY, set())
    if digest not in kept and links.keep_upload(name, data) is not None:
        kept.add(digest)


def result_note(image: str, network: str, digest: str = "") -> str:
    """A sentence when a kept result (of `image`, shown by its name and told apart by its content `digest`, and
    `network`, by its title) is not of the image and network chosen above it now (`links.result_note`), else
    ''. Markdown, names escaped."""
    chosen = st.session_state.get(CHOSEN_KEY)
    if chosen is None:
        return ""
    name, current_digest, title = chosen
    return links.result_note(plain(image), plain(network), None if name is None else plain(name),
                             None if title is None else plain(title),
                             result_digest=digest, current_digest=current_digest or "")


def result_note_line(image: str, network: str, digest: str = "") -> str:
    """`result_note` as a bold second line of a result's caption, or ''."""
    note = result_note(image, network, digest)
    return f"  \n**{note}**" if note else ""
