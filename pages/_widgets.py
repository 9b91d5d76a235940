"""Streamlit widgets and glue shared by the pages (not a page itself: app.py lists the pages).

Image and network inputs (the network menu with your model cards and any torchvision classifier, and the
"Add your network" form), target choice, bottleneck settings, method lists, statistics with a progress
bar, error display, and the session's caches. The logic lives in `iba_core.app`, the drawing in
`iba_core.render`; this module only gathers inputs and shows progress.
"""
from __future__ import annotations

import json
import logging
import runpy
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Iterator
from urllib.parse import urlencode

import streamlit as st
import torch
from PIL import Image
from streamlit.delta_generator import DeltaGenerator

from iba_core.app import links
from iba_core.app.choices import BETA_K_CHOICES, DEFAULT_BETA_K, DEFAULT_SAMPLE, MethodChoices, unavailable_text
from iba_core.app.inputs import (
    MAX_UPLOAD_MB, ImageInput, sample_input, shown_note, size_warnings, upload_input, upload_types_text,
)
from iba_core.app.maps import MapCache
from iba_core.app.models import (
    DEFAULT_ARCH, DEFAULT_TORCHVISION, FOLDER_FILES, NETWORK_SOURCES, TORCHVISION_CHOICE, FileGiven, NewNetwork,
    add_network, find_cards, kept_option, network_label, network_options, parse_triple, preview_network, source_note,
    source_version, torchvision_key, torchvision_names,
)
from iba_core.app.state import SharedModel, Subject, load_shared
from iba_core.app.stats_source import (
    choose_stats, domain_warning, stats_folder, stats_for_methods, stats_progress_text, stats_status,
)
from iba_core.errors import USER_ERRORS, user_message
from iba_core.heads import PROBABILITY_NOTES
from iba_core.images import ImageError, sample_image_names
from iba_core.networks import (
    REGISTRY, Network, find_weights, get_spec,
)
from iba_core.networks.cards import BUILTIN_BACKBONES, CROP_RANGE, RESIZE_RANGE
from iba_core.per_sample import BottleneckSettings
from iba_core.render.text import format_beta, format_probability
from iba_core.settings import max_stats_samples, models_dir, weights_dir
from iba_core.trust import ANY, Trust, check_server_path, is_local_address
from iba_core.feature_stats import FeatureStats, app_samples

log = logging.getLogger("iba_explorer")

SOURCES = ("Sample photo", "Upload")
#: The entry script, which lists the pages.
APP_SCRIPT = Path(__file__).resolve().parents[1] / "app.py"
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


def presentation_toggle() -> bool:
    """The sidebar's Presentation mode toggle (larger text and maps for a projector); when on, one style rule
    on the root element raises the page's base font size. Returns whether it is on."""
    on = st.sidebar.toggle("Presentation mode", key=PRESENTATION_KEY,
                           help="Larger text on every page, and larger maps where a page draws them (the β × "
                                "layer grid), for a projector in a lecture hall. Collapse the sidebar (« at its "
                                "top) to give the maps the whole width.")
    if on:  # only the root font size: everything in rem follows, nothing else is restyled
        st.html(f"<style>html {{ font-size: {PRESENTATION_FONT_PX}px; }}</style>")
    return on


def presentation() -> bool:
    """Whether presentation mode is on (the sidebar's toggle)."""
    return bool(st.session_state.get(PRESENTATION_KEY, False))


# ---- text from users ---------------------------------------------------------------------------

#: Markdown's special characters, and ':' (Streamlit's `:color[…]`, `:material/…:` and GFM's bare
#: http:// links need it).
MARKDOWN_SPECIAL = frozenset("\\`*_[]()#+-!<>|~$:")


def plain(text: object) -> str:
    """`text` (a card's title, a class name, a file name: anything a user chose) safe inside the Markdown of
    st.markdown, st.caption, st.info… and widget labels: every Markdown character escaped and line breaks made
    spaces, so it shows as typed and never as a link, an image, a heading or formatting."""
    return "".join("\\" + c if c in MARKDOWN_SPECIAL else c for c in " ".join(str(text).splitlines()))


# ---- errors ------------------------------------------------------------------------------------


def show_error(err: BaseException) -> None:
    """A readable st.error instead of a traceback: the message with its app hint (`errors.user_message`);
    unexpected errors are logged."""
    if not isinstance(err, USER_ERRORS):
        log.exception("Unexpected error in IBA Explorer", exc_info=err)
    st.error(user_message(err, "app"), icon=":material/error:")


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


# ---- waiting for the network -------------------------------------------------------------------

#: Shown while another session's run holds the shared network (updated every WAIT_POLL_S seconds).
WAIT_MESSAGE = "Waiting for another run to finish ({seconds:.0f} s)…"


@contextmanager
def network_turn(shared: SharedModel, timing: dict | None = None) -> Iterator[Network]:
    """`shared.busy()`, saying "Waiting for another run to finish (N s)" while another session holds
    the network (the message updates while it waits, and disappears once the turn comes).

    timing, if given, gets the seconds waited added to timing["wait"].
    """
    holder = st.empty()

    def on_wait(seconds: float) -> None:
        holder.info(WAIT_MESSAGE.format(seconds=seconds), icon=":material/hourglass_top:")

    start = time.monotonic()
    with shared.busy(on_wait=on_wait) as network:
        holder.empty()
        if timing is not None:
            timing["wait"] = timing.get("wait", 0.0) + time.monotonic() - start
        yield network


# ---- models ------------------------------------------------------------------------------------


@st.cache_resource(show_spinner="Loading the network…", max_entries=3)
def shared_model(key: str, version: int = 0, trust: Trust | None = None) -> SharedModel:
    """One model (and its lock) per network for all sessions; failures are not cached, so placing
    the weights file and rerunning is enough. version: changes when a model card or its weights file
    changes (`source_version`), so the edited network is loaded anew. trust: the owner's (`app_trust`)."""
    return load_shared(key, trust)


def app_trust() -> Trust:
    """What this app's owner allows (IBA_TRUST_CODE, IBA_DATA_DIRS); paths on the server typed by a visitor
    anywhere only when the server listens on this machine alone (its visitor is its owner)."""
    return Trust.for_app(localhost=is_local_address(st.get_option("server.address")))


# ---- widget state that survives page switches ---------------------------------------------------


def _restore(key: str, default: Any) -> None:
    """Give the widget the last choice made on any page (called before the widget is created).

    Widget state belongs to the page that showed the widget; our own copy carries it across pages.
    """
    st.session_state[key] = st.session_state.get(f"_keep_{key}", st.session_state.get(key, default))


def _remember(key: str) -> None:
    st.session_state[f"_keep_{key}"] = st.session_state[key]


def _forget_cleared_upload() -> None:
    if st.session_state.get("upload") is None:
        st.session_state.pop("_keep_upload", None)


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
#: (network menu choice, image digest) the page's controls were last drawn for.
CONTROLS_FOR_KEY = "_controls_for"


def _read_link(trust: Trust) -> None:
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
            st.session_state["_keep_image_source"] = SOURCES[1]
            st.session_state["_keep_upload"] = kept
    elif view.image is not None:
        st.session_state["_keep_image_source"] = SOURCES[0]
        st.session_state["_keep_sample_name"] = view.image
    if view.network is not None:
        option = links.network_option(view.network, cards)
        st.session_state["_keep_network"] = option
        if option == TORCHVISION_CHOICE:
            st.session_state["_keep_tv_network"] = view.network[len(TORCHVISION_CHOICE):]
    # The address bar keeps only what was used: a refused value is not passed on by copying the link.
    others = {name: value for name, value in params.items() if name not in links.PARAMS}
    st.query_params.from_dict({**links.to_params(view), **others})
    st.session_state[LINK_PENDING_KEY] = (view, None)
    st.session_state[LINK_PROBLEMS_KEY] = problems


def _fit_link(network: Network) -> links.View | None:
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


def _take_from_link(network: Network | None, field: str) -> Any:
    """A value the link asked for that a widget about to be made takes (once), or None. network: the one the
    widget belongs to (the link's layer and class are for the network it was checked for); None for β·k."""
    pending = st.session_state.get(LINK_PENDING_KEY)
    view = _fit_link(network) if network is not None else pending[0] if pending is not None else None
    value = getattr(view, field) if view is not None else None
    if value is not None:
        st.session_state[LINK_PENDING_KEY] = (replace(view, **{field: None}), pending[1] if network is None
                                              else network.key)
    return value


def _link_set(**values: str | None) -> None:
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
                   "keeps), the network, layer, β·k, class and replay step. Bookmark or share it; it opens the view "
                   "with its settings, and Run makes the result.")
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
    _link_set(step=str(st.session_state.get(key, steps)))
    return key


def _keep_for_links(name: str, data: bytes, digest: str) -> None:
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


# ---- inputs ------------------------------------------------------------------------------------


@dataclass
class Inputs:
    """What both pages need before a run: the image, the network and its top-5 for that image."""

    image: ImageInput
    shared: SharedModel
    cropped: Image.Image  # 224×224 RGB the network sees
    x: torch.Tensor  # (1, 3, 224, 224) normalised
    top5: list[tuple[int, str, float]]
    controls: DeltaGenerator  # where the page puts its settings form (right of the inputs)
    #: Under the network choice: the warning about out-of-domain statistics (a model card's network without
    #: an image folder); `stats_settings` updates it once the page's folder field is read.
    stats_note: DeltaGenerator | None = None

    @property
    def network(self) -> Network:
        return self.shared.network


def image_picker(network: Network | None = None) -> ImageInput | None:
    """Sample photo or upload, read for `network`'s input channels (RGB without one); a refused upload shows
    st.error and returns None."""
    pre = network.preprocess if network is not None else None
    channels, bands = (pre.channels, pre.display_bands) if pre is not None else (3, None)
    types = upload_types_text(channels)
    _restore("image_source", SOURCES[0])
    source = st.radio(
        "Image", SOURCES, key="image_source", horizontal=True, on_change=_remember, args=("image_source",)
    )
    if source == SOURCES[0]:
        _restore("sample_name", DEFAULT_SAMPLE)
        name = st.selectbox(
            "Sample photo", sample_image_names(), key="sample_name", on_change=_remember, args=("sample_name",),
            help="Photos bundled with scikit-image; they work offline.",
        )
        try:
            return sample_input(name, channels)
        except ImageError as err:
            show_error(err)
            return None

    # Any file type is taken here and checked by the loader, so that a refused file gets its real reason
    # as st.error (a type list would make the widget refuse it silently, in a tooltip).
    uploaded = st.file_uploader(
        "Upload an image", type=None, key="upload", max_upload_size=MAX_UPLOAD_MB,
        on_change=_forget_cleared_upload,
        help=f"{types}, up to {MAX_UPLOAD_MB} MB (of a GIF, the first frame). "
        "It is resized to 256 px and centre-cropped to 224 px.",
    )
    if uploaded is not None:
        data = uploaded.getvalue()
        try:
            chosen = upload_input(uploaded.name, data, channels=channels, display_bands=bands)
        except ImageError as err:
            show_error(err)
            return None
        st.session_state["_keep_upload"] = (uploaded.name, data)  # so the other page can reuse it
        _keep_for_links(uploaded.name, data, chosen.digest)
        _format_caption(chosen)
        return chosen
    kept = st.session_state.get("_keep_upload")
    if kept is not None:
        st.caption(f"Using **{plain(kept[0])}**, uploaded earlier.")
        try:  # (read for this network: an earlier upload may not fit its channels)
            chosen = upload_input(*kept, channels=channels, display_bands=bands)
        except ImageError as err:
            show_error(err)
            return None
        _keep_for_links(*kept, chosen.digest)  # (opened from a link: kept again if removed meanwhile)
        _format_caption(chosen)
        return chosen
    st.info(f"Choose an image file to upload ({types}), or pick a sample photo.",
            icon=":material/upload:")
    return None


def _format_caption(chosen: ImageInput) -> None:
    note = chosen.format_note
    if note:
        st.caption(note)


def network_picker(controls: DeltaGenerator | None = None) -> SharedModel | None:
    """Network choice: the built-ins, your networks (the model cards in the models folder), any torchvision
    classifier; then the "Add your network" form. A network that cannot be loaded shows its reason as
    st.error and returns None. controls: the page's controls (`input_section`), which say that the network
    loads instead of showing the previous network's layers and classes meanwhile."""
    trust = app_trust()
    cards = find_cards(trust=trust)
    options = network_options(cards)
    st.session_state["network"] = kept_option(
        st.session_state.get("_keep_network", st.session_state.get("network")), options)
    key = st.selectbox(
        "Network", options, key="network", format_func=lambda k: network_label(k, cards),
        on_change=_remember, args=("network",),
        help="The built-in ImageNet networks, your own networks (the model cards in the models folder "
        f"{models_dir()}, set by IBA_MODELS_DIR), or any torchvision classifier.",
    )
    if key == TORCHVISION_CHOICE:
        key = torchvision_picker()
    st.session_state[NETWORK_CHOICE_KEY] = key  # for the link, also when this network does not load
    if key in REGISTRY:
        spec = get_spec(key)
        path = find_weights(spec)
        st.caption(f"{spec.note} Weights: `{path.name}`." if path else spec.note)
    if controls is not None and key != (st.session_state.get(CONTROLS_FOR_KEY) or ("",))[0]:
        controls.info(f"Loading {plain(network_label(key, cards))}: its layers and classes appear here once it is "
                      "ready.", icon=":material/hourglass_top:")
    shared = None
    try:
        shared = shared_model(key, source_version(key, trust), trust)
    except Exception as err:  # noqa: BLE001 - a card or weights file that does not fit: its message, no traceback
        show_error(err)
    if shared is not None and key not in REGISTRY:
        st.caption(source_note(key, shared.network))
    unusable = [c for c in cards if c.error]
    if unusable:
        st.caption("Model cards in the models folder that cannot be used:  \n"
                   + "  \n".join(f"· {plain(c.name)}: {plain(c.error)}" for c in unusable))
    add_network_form(trust)
    return shared


def torchvision_picker() -> str:
    """A torchvision classifier by name, with where its weights come from; returns torchvision:NAME."""
    names = torchvision_names()
    _restore("tv_network", DEFAULT_TORCHVISION)
    if st.session_state["tv_network"] not in names:
        st.session_state["tv_network"] = DEFAULT_TORCHVISION
    name = st.selectbox("torchvision classifier", names, key="tv_network", on_change=_remember,
                        args=("tv_network",), help="torchvision's classification networks, with their ImageNet "
                        "weights, class names and preprocessing.")
    st.caption(
        "Pretrained ImageNet weights: downloaded by torchvision where there is internet, else the file must be in "
        f"torch's cache or in the folder IBA_WEIGHTS_DIR names ({weights_dir() or 'not set'})."
    )
    return torchvision_key(name)


# ---- adding your own network -------------------------------------------------------------------

#: A message about the last "Add your network" submission, shown on the next run (the form reruns the page).
ADDED_KEY = "_added_network"


def add_network_form(trust: Trust) -> None:
    """The "Add your network" form: a source (torchvision, timm, a Hugging Face id, a built-in backbone with your
    head, each with an uploaded or local state_dict; or a model folder, uploaded or local), an optional class list,
    the preprocessing, a statistics folder and the default layer. "Check" shows what would be read (classes,
    preprocessing, channels, head, default layer) without adding anything; "Add network" writes a model card into
    the models folder, checked by loading it first. On success the new network is chosen; a refusal says why and
    changes nothing. Paths on the server are read only where `trust` allows (`app_trust`)."""
    added = st.session_state.pop(ADDED_KEY, None)
    if added:
        st.success(added, icon=":material/check_circle:")
    with st.expander("Add your network", icon=":material/add_circle:"):
        st.caption(
            "Your fine-tuned classifier: an architecture from torchvision, timm, the Hugging Face Hub or a built-in "
            "backbone with its weights as a state_dict (`torch.save(model.state_dict(), \"model.pth\")`, or "
            ".safetensors), or a whole model folder saved by timm or transformers. The class names (one a line, in "
            "the order of the outputs) are needed where the model's own configuration does not name them. "
            f"The files and a model card are written to {models_dir()} (IBA_MODELS_DIR). Weights are read as "
            "tensors only: a whole pickled model is refused. " + _server_paths_note(trust)
        )
        # Plain widgets and a button, not an st.form: a page without a usable image shows no form at all.
        with st.container():
            form: dict[str, Any] = {}
            form["name"] = st.text_input("Name", key="add_name", placeholder="e.g. skin-lesions",
                                         help="Letters, digits, '-', '_' or '.'; names the folder and the card.")
            form["source"] = st.radio("Source", list(NETWORK_SOURCES), format_func=NETWORK_SOURCES.get,
                                      key="add_source", horizontal=True,
                                      help="Where the network's architecture comes from.")
            form.update(_source_fields(form["source"]))
            form["classes"] = st.file_uploader(
                "Class names (.txt, .json, .csv)", type=None, key="add_classes",
                help="One name a line (or a JSON list, or CSV index,name), in the order of the outputs. Optional "
                "where the model's configuration names its classes and your weights keep its output layer.")
            c1, c2 = st.columns(2)
            form["resize"] = c1.number_input("Resize", *RESIZE_RANGE, value=None, step=1, key="add_resize",
                                             placeholder="architecture's", help="Shorter side before the crop, in px.")
            form["crop"] = c2.number_input("Crop", *CROP_RANGE, value=None, step=1, key="add_crop",
                                           placeholder="architecture's", help="Centre crop the network sees, in px.")
            form["mean"] = c1.text_input("Mean", key="add_mean", placeholder="architecture's",
                                         help="Three numbers, e.g. 0.485, 0.456, 0.406. Empty: the architecture's "
                                         "default (ImageNet's for most).")
            form["std"] = c2.text_input("Std", key="add_std", placeholder="architecture's",
                                        help="Three numbers, e.g. 0.229, 0.224, 0.225. Empty: the architecture's "
                                        "default.")
            form["images"] = st.text_input(
                "Image folder for the statistics (optional)", key="add_images", placeholder="/path/to/your/images",
                help="A folder of your own images on this machine (searched recursively): the feature statistics "
                "come from it. Without one, the sample photos are used, which distorts the bits of a network "
                "trained on other images.")
            form["layer"] = st.text_input("Default layer (optional)", key="add_layer", placeholder="e.g. layer2",
                                          help="A module name, e.g. layer2 for a ResNet. Empty: the source's "
                                          "default, else the last feature map of at least 28 × 28.")
            check, add = st.columns(2)
            checked = check.button("Check", icon=":material/fact_check:", key="add_check_button",
                                   help="Load the network once and show what was read; nothing is added.")
            submitted = add.button("Add network", icon=":material/save:", key="add_network_button")
            if checked:
                _check_network(trust, form)
    if submitted:
        _add_network(trust, form)


def _source_fields(source: str) -> dict[str, Any]:
    """The fields the chosen source needs: its architecture and a state_dict, or a model folder's files."""
    if source == "folder":
        files = st.file_uploader(
            f"The model folder's files ({', '.join(FOLDER_FILES[:3])})", type=None, accept_multiple_files=True,
            key="add_folder_files", help="Choose them together: the folder timm's save_for_hf or transformers' "
            "save_pretrained wrote. Its configuration gives the architecture, class names and preprocessing.")
        path = st.text_input("…or the model folder's path on this machine", key="add_folder_path",
                             placeholder="/path/to/model-folder")
        return {"arch": "", "folder_files": files or [], "folder_path": path}
    if source == "torchvision":
        names = torchvision_names()
        arch = st.selectbox("Architecture (torchvision)", names, index=names.index(DEFAULT_ARCH), key="add_arch",
                            help="The torchvision builder your model was made with; its output layer is sized by "
                            "your class list.")
    elif source == "timm":
        arch = st.text_input("timm model name", key="add_timm_arch", placeholder="e.g. resnet18, convnext_tiny",
                             help="The name your model was created with in timm; its preprocessing and class "
                             "names come from timm's configuration.")
    elif source == "hf":
        arch = st.text_input("Hugging Face model id", key="add_hf_arch",
                             placeholder="e.g. google/vit-base-patch16-224",
                             help="The model your network was fine-tuned from: its configuration (architecture, "
                             "preprocessing, class names) comes from the Hugging Face Hub or this machine's cache; "
                             "your weights replace its own.")
    else:
        arch = st.selectbox("Built-in backbone", BUILTIN_BACKBONES, key="add_builtin_arch",
                            format_func=lambda k: REGISTRY[k].title.split(" (")[0],
                            help="The built-in network's layers, preprocessing and stages, with your own head.")
    limit = st.get_option("server.maxUploadSize")
    weights = st.file_uploader("Weights (.pth, .pt, .safetensors)", type=None, key="add_weights",
                               help=f"Up to {limit} MB (the server's upload limit); for a larger file give its "
                               "path below.")
    weights_path = st.text_input("…or the weights file's path on this machine", key="add_weights_path",
                                 placeholder="/path/to/model.pth")
    return {"arch": arch or "", "weights": weights, "weights_path": weights_path}


def _server_paths_note(trust: Trust) -> str:
    """Which paths on the server the form's path fields may name, in words."""
    if trust.server_paths == ANY:
        return "Paths below are read on this machine (the app listens on it alone)."
    folders = ", ".join(f"`{p}`" for p in trust.server_paths)
    return (f"Paths typed below are read only inside {folders} (the models folder and IBA_DATA_DIRS); "
            "elsewhere, upload the file.")


def _new_network(form: dict[str, Any]) -> NewNetwork:
    """The form's values as the library takes them (a path typed for the weights wins over an upload)."""
    weights, weights_path = form.get("weights"), (form.get("weights_path") or "").strip()
    classes, resize, crop = form["classes"], form["resize"], form["crop"]
    return NewNetwork(
        name=form["name"], arch=form["arch"], source=form["source"],
        weights=(FileGiven.local(weights_path) if weights_path else
                 FileGiven.upload(weights.name, weights.getvalue()) if weights is not None else None),
        classes=FileGiven.upload(classes.name, classes.getvalue()) if classes is not None else None,
        folder_files=[FileGiven.upload(f.name, f.getvalue()) for f in form.get("folder_files", [])],
        folder_path=form.get("folder_path", ""), layer=form["layer"], stats_images=form["images"],
        preprocess={"resize": None if resize is None else int(resize), "crop": None if crop is None else int(crop),
                    "mean": parse_triple(form["mean"], "mean"), "std": parse_triple(form["std"], "std")},
    )


def _check_network(trust: Trust, form: dict[str, Any]) -> None:
    """The preview: what the network would be (nothing is written), or the library's message."""
    try:
        new = _new_network(form)
        with st.spinner("Checking the network: loading it once…"):
            preview = preview_network(new, trust=trust)
    except Exception as err:  # noqa: BLE001 - the library's message; nothing was written
        show_error(err)
        return
    st.caption(f"What {plain(preview.name)} would be, read from its files; if it is right, add it.")
    # One line per entry, wrapped: the form sits in the narrow sidebar column, where a table cuts its values off.
    st.markdown("  \n".join(f"**{plain(what)}:** {plain(value)}" for what, value in preview.rows()))


def _add_network(trust: Trust, form: dict[str, Any]) -> None:
    try:
        new = _new_network(form)
        with st.spinner("Checking the network: loading its weights and class list…"):
            card = add_network(new, trust=trust)
    except Exception as err:  # noqa: BLE001 - the library's message; nothing was written, the choice stays
        show_error(err)
        return
    st.session_state["_keep_network"] = str(card)
    st.session_state[ADDED_KEY] = (f"Added {plain(card.stem)}: its model card is {plain(card)}. It is chosen in the "
                                   "Network menu now, on every page.")
    st.rerun()


def input_section(widths: tuple[float, float] = (2, 3)) -> Inputs | None:
    """Image and network on the left, the page's controls on the right (Inputs.controls).

    widths: relative widths of the two columns. Returns None when the image or the network is
    unavailable; the reason is shown as st.error. Images that preprocessing blows up or crops hard
    get a warning under the crop.
    """
    st.session_state.pop(LINK_SLOT_KEY, None)  # (this run's, made below: never write into a previous run's)
    st.session_state.pop(STEP_NOTE_KEY, None)
    _read_link(app_trust())
    link_note = st.empty()  # what of the page's link could not be used
    left, right = st.columns(list(widths), gap="large")
    # The page's controls, in one slot: emptied (or saying that a network loads) while another image or
    # network is set up, so no layer or class of the previous one stays on screen meanwhile.
    slot = right.empty()
    with left:
        # The image is shown above the network but read after it: its channels are the network's (a gray or a
        # multi-band network reads a .npy or TIFF of its own bands).
        image_slot = st.container()
        shared = network_picker(slot)
        stats_note = st.empty()
        with image_slot:
            image = image_picker(shared.network if shared is not None else None)
        pending = st.session_state.get(LINK_PENDING_KEY)
        link_section(pending[0].step if pending is not None else None)
    st.session_state[CHOSEN_KEY] = (image.name if image is not None else None,
                                    image.digest if image is not None else None,
                                    shared.network.spec.title if shared is not None else None)
    if shared is None:  # the chosen network did not load: the link names it, and no layer or class of another
        _link_set(image=links.image_value(image) if image is not None else None,
                  network=st.session_state.get(NETWORK_CHOICE_KEY), layer=None, target=None, step=None)
    else:
        _link_set(image=links.image_value(image) if image is not None else None, network=shared.network.key)
    if shared is not None:
        _fit_link(shared.network)
    problems = st.session_state.pop(LINK_PROBLEMS_KEY, None)
    if problems:
        link_note.warning("This link could not be opened in full. " + " ".join(plain(p) for p in problems),
                          icon=":material/link_off:")
    if image is None or shared is None:
        slot.info("Choose a usable image and network on the left to set up a run.", icon=":material/arrow_back:")
        st.session_state.pop(CONTROLS_FOR_KEY, None)
        return None
    network = shared.network
    show_domain_warning(stats_note, network)
    cropped = network.preprocess.crop(image.image)
    x = network.preprocess.normalise(cropped)
    shown_for = (shared.source, image.digest)
    if st.session_state.get(CONTROLS_FOR_KEY) != shown_for:
        slot.empty()  # another image: its classes come with its top-5, none of the previous image's meanwhile
    right = slot.container()
    with right, network_turn(shared):
        top5 = network.top_k(x, 5)
        # a multi-label network sees every label above 50 %, not just its top one
        present = network.labels_above(x) if network.head == "sigmoid" else None
    st.session_state[CONTROLS_FOR_KEY] = shown_for
    with left:
        best = top5[0]
        size = network.preprocess.crop_size
        labels = "" if present is None else (
            " · Labels above 50 %: " + (", ".join(f"{plain(n)} ({format_probability(p)})" for _, n, p in present)
                                        or "none") + ". " + PROBABILITY_NOTES[network.head])
        shown = shown_note(cropped, network.preprocess.channels)  # a gray image, or which bands make the colours
        st.image(cropped.convert("RGB"), width=224, caption=(
            f"The {size} × {size} centre crop the network sees{'; ' + shown if shown else ''}. Top prediction: "
            f"{plain(best[1])} ({format_probability(best[2])}){labels}"
        ))
        for warning in size_warnings(image.image.size, network.preprocess.resize, network.preprocess.crop_size):
            st.warning(warning, icon=":material/crop:")
    return Inputs(image, shared, cropped, x, top5, right, stats_note)


def subject_caption(subject: Subject) -> str:
    """`Subject.caption` (image · network · class, Markdown) with the names escaped (`plain`); when the result is
    not of the image and network chosen above, a second line says so (`result_note`)."""
    return replace(subject, image=plain(subject.image), model=plain(subject.model),
                   class_name=plain(subject.class_name)).caption + result_note_line(subject.image, subject.model,
                                                                                    subject.image_digest)


def show_domain_warning(slot: DeltaGenerator, network: Network, folder: str | None = None) -> None:
    """In `slot`: the warning that the sample photos' statistics distort the bits of a model card's network
    without an image folder (`iba_core.app.stats_source.domain_warning`), or nothing."""
    warning = domain_warning(network, folder)
    if warning:  # it starts with the network's title, which a card chose: escaped, the rest is the app's Markdown
        title = network.spec.title
        slot.warning(warning.replace(title, plain(title), 1), icon=":material/warning:")
    else:
        slot.empty()


# ---- form widgets (call inside st.form) ----------------------------------------------------------


def layer_picker(inputs: Inputs, prefix: str, label: str = "Layer") -> str:
    """The layer (its key holds the network's: another network's layers are never offered)."""
    spec = inputs.network.spec
    why = ("paper, Appendix" if spec.key in REGISTRY else
           "the model card's, or the last feature map of at least 28 × 28")
    key = f"{prefix}_layer_{spec.key}"
    linked = _take_from_link(inputs.network, "layer")
    if linked is not None:
        st.session_state[key] = linked
    layer = st.selectbox(
        label, spec.layers, index=spec.layers.index(spec.default_layer), key=key,
        format_func=inputs.network.layer_label,  # name · shape (map or tokens)
        help=f"Where the bottleneck sits. Default for this network: {spec.default_layer} ({why}).",
    )
    _link_set(layer=layer)
    return layer


def beta_picker(prefix: str) -> float:
    linked = _take_from_link(None, "beta_k")
    if linked is not None:
        st.session_state[f"{prefix}_beta"] = linked
    beta_k = st.select_slider(
        "β·k (information penalty)", options=BETA_K_CHOICES, value=DEFAULT_BETA_K, format_func=format_beta,
        key=f"{prefix}_beta",
        help="The loss is L_CE + β·L_I with β = (β·k)/k, k = number of feature elements. "
        "Larger β lets fewer bits through. Paper default: β·k = 10.",
    )
    _link_set(beta_k=links.to_params(links.View(beta_k=float(beta_k)))["beta_k"])
    return beta_k


def target_picker(inputs: Inputs, prefix: str) -> int | str:
    """A top-5 class (radio), unless a class name or index is typed below (returned as typed)."""
    top = inputs.top5
    key_suffix = f"{inputs.network.key}_{inputs.image.digest}"  # new image → back to its top-1
    other_key, other_for = f"{prefix}_other", f"_{prefix}_other_for"
    if st.session_state.get(other_for, inputs.network.key) != inputs.network.key:
        st.session_state[other_key] = ""  # a class typed for another network names another class here, or none
    st.session_state[other_for] = inputs.network.key
    linked = _take_from_link(inputs.network, "target")
    if linked is not None:  # a top-5 class on the radio, any other in the field
        in_top = linked in [i for i, _, _ in top]
        st.session_state[f"{prefix}_target_{key_suffix}" if in_top else other_key] = linked if in_top else str(linked)
    chosen = st.radio(
        "Class to explain", [i for i, _, _ in top], key=f"{prefix}_target_{key_suffix}",
        format_func=lambda i: next(f"{plain(n)} · {format_probability(p)}" for j, n, p in top if j == i),
        help="The network's five most probable classes for this image, with their probabilities. "
        + PROBABILITY_NOTES[inputs.network.head],
    )
    n = len(inputs.network.categories)
    other = st.text_input(
        f"…or any {'ImageNet ' if n == 1000 else ''}class (overrides the choice above)", key=f"{prefix}_other",
        placeholder=f"class name or index, e.g. {inputs.network.categories[top[-1][0]]} or {top[-1][0]}",
        help=f"A class index 0–{n - 1}, or a class name: the exact name (any case), or a part of one that fits "
        "a single class. A part that fits several classes is refused with the candidates listed.",
    )
    try:
        index = inputs.network.class_index(other.strip()) if other.strip() else int(chosen)
    except ValueError:  # an unknown or ambiguous name: Run says why; the link names no class meanwhile
        index = None
    _link_set(target=None if index is None else str(index))
    return other.strip() or chosen


def advanced_settings(prefix: str) -> BottleneckSettings:
    """Steps, batch, learning rate, σ_s and seed (paper defaults) inside an expander."""
    d = BottleneckSettings()
    with st.expander("Advanced", icon=":material/tune:"):
        c1, c2 = st.columns(2)
        steps = c1.number_input("Steps T", 1, 200, d.steps, key=f"{prefix}_steps", help="Adam iterations.")
        batch = c2.number_input("Batch B", 1, 64, d.batch, key=f"{prefix}_batch", help="Noisy copies per step.")
        lr = c1.number_input("Learning rate η", 0.001, 10.0, d.lr, step=0.1, format="%.3f", key=f"{prefix}_lr")
        sigma = c2.number_input("Smoothing σ_s", 0.0, 10.0, d.sigma, step=0.5, key=f"{prefix}_sigma",
                                help="Gaussian smoothing of the mask, in feature-map cells.")
        seed = c1.number_input("Seed", 0, 2**31 - 1, d.seed or 0, key=f"{prefix}_seed")
    return BottleneckSettings(steps=int(steps), batch=int(batch), lr=float(lr), sigma=float(sigma), seed=int(seed))


def stats_settings(inputs: Inputs, prefix: str, layer: str) -> tuple[str | None, int]:
    """Optional image folder and sample count for the layer statistics μ_R, σ_R."""
    with st.expander("Feature statistics", icon=":material/bar_chart:"):
        st.caption(
            "The bottleneck replaces features by noise with the layer's mean and standard deviation, "
            f"estimated over many images. {stats_status(inputs.network, layer)}"
        )
        card_folder = stats_folder(inputs.network)
        folder = st.text_input(
            "Image folder for better statistics (optional)", key=f"{prefix}_folder",
            placeholder=card_folder or "/path/to/imagenet/val",
            help=(f"Empty: the model card's folder {card_folder}. " if card_folder else "")
            + "A folder of images like those the network was trained on (for ImageNet networks: natural photos); "
            "searched recursively.",
        )
        top = max_stats_samples()
        n = st.number_input("Samples", 1, top, min(top, app_samples(inputs.network, card_folder)), step=100,
                            key=f"{prefix}_n",
                            help=f"Images (or augmented sample crops) to estimate μ and σ from; 1000 recommended, at most {top} "
                            "here (each one is a pass of the network while other visitors wait).")
    folder = folder.strip() or None
    if inputs.stats_note is not None:
        show_domain_warning(inputs.stats_note, inputs.network, folder)
    return folder, int(n)


def settings_row(inputs: Inputs, prefix: str, layer: str) -> tuple[BottleneckSettings, str | None, int]:
    """The two expanders side by side: optimisation settings and feature statistics."""
    left, right = st.columns(2)
    with left:
        settings = advanced_settings(prefix)
    with right:
        folder, n = stats_settings(inputs, prefix, layer)
    return settings, folder, n


def resolve_target(inputs: Inputs, target: int | str) -> int:
    """Class index for the target widget's value; raises ValueError for an unknown or ambiguous class name."""
    return inputs.network.class_index(target)


def method_picker(label: str, key: str, choices: MethodChoices, names: dict[str, str], defaults: Iterable[str],
                  help: str) -> list[str]:
    """A multiselect of the methods that can run on this network; the others are listed with their reason.

    A selection kept from another network drops the methods this one cannot run.
    """
    st.session_state[key] = choices.defaults(st.session_state.get(key, defaults))
    methods = st.multiselect(label, choices.keys, key=key, format_func=lambda k: names[k], help=help)
    note = unavailable_text(choices, names)
    if note:
        st.caption(plain(note))  # the reasons name the network by its title
    return methods


# ---- statistics with a progress bar ------------------------------------------------------------


def stats_with_progress(inputs: Inputs, layer: str, folder: str | None, n: int,
                        timing: dict | None = None) -> FeatureStats:
    """Statistics for `layer`, showing a progress bar while they are estimated (cached afterwards).

    timing, if given, gets timing["stats"] (seconds, without waiting for another session) and the
    seconds waited added to timing["wait"].
    """
    if folder:  # a visitor's path on the server: only inside the owner's folders (checked before any scan)
        check_server_path(Path(folder).expanduser(), app_trust(), what="image folder")
    holder = st.empty()
    started = time.perf_counter()

    def progress(done: int, total: int, label: str = "") -> None:
        text = stats_progress_text(layer, done, total, time.perf_counter() - started)
        holder.progress(min(done / max(total, 1), 1.0), text=text)

    with network_turn(inputs.shared, timing):
        start = time.perf_counter()
        stats = choose_stats(inputs.network, layer, folder=folder, n=n, progress=progress)
        if timing is not None:
            timing["stats"] = time.perf_counter() - start
    holder.empty()
    return stats


def stats_for_methods_with_progress(inputs: Inputs, methods: list[str]) -> None:
    """Estimate the statistics that `methods` read (if any needs them, and they are not cached), with a bar;
    the methods then read them from the cache (a model card's from its image folder)."""
    holder = st.empty()
    layer = inputs.network.spec.default_layer
    started = time.perf_counter()

    def progress(done: int, total: int, label: str = "") -> None:
        text = stats_progress_text(layer, done, total, time.perf_counter() - started)
        holder.progress(min(done / max(total, 1), 1.0), text=text)

    with network_turn(inputs.shared) as network:
        stats_for_methods(network, methods, progress=progress)
    holder.empty()


# ---- results kept across reruns ----------------------------------------------------------------


#: One attribution-map cache per browser session, shared by the Compare and Evaluate pages, so a map
#: computed on one page is reused on the other.
MAP_CACHE_KEY = "map_cache"


def map_cache() -> MapCache:
    return st.session_state.setdefault(MAP_CACHE_KEY, MapCache())
