"""The network menu: the built-ins, the model cards in the models folder, any torchvision classifier; one
shared model per network for all sessions."""
from __future__ import annotations

import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from iba_core.app.models import (
    DEFAULT_TORCHVISION, TORCHVISION_CHOICE, find_cards, kept_option, network_label, network_options, source_note,
    source_version, torchvision_key, torchvision_names,
)
from iba_core.app.state import SharedModel, load_shared
from iba_core.networks import REGISTRY, find_weights, get_spec
from iba_core.settings import models_dir, weights_dir
from iba_core.trust import Trust, visitor_path, visitor_text

from pages.widgets.add_network import add_network_form
from pages.widgets.errors import shown_errors
from pages.widgets.links import NETWORK_CHOICE_KEY
from pages.widgets.page import app_trust, kept_choice, remember_choice, restore_choice
from pages.widgets.text import plain


@st.cache_resource(show_spinner="Loading the network…", max_entries=3)
def shared_model(key: str, version: int = 0, trust: Trust | None = None) -> SharedModel:
    """One model (and its lock) per network for all sessions; failures are not cached, so placing
    the weights file and rerunning is enough. version: changes when a model card or its weights file
    changes (`source_version`), so the edited network is loaded anew. trust: the owner's (`app_trust`)."""
    return load_shared(key, trust)


#: (network menu choice, image digest) the page's controls were last drawn for.
CONTROLS_FOR_KEY = "_controls_for"


def network_picker(controls: DeltaGenerator | None = None) -> SharedModel | None:
    """Network choice: the built-ins, your networks (the model cards in the models folder), any torchvision
    classifier; then the "Add your network" form. A network that cannot be loaded shows its reason as
    st.error and returns None. controls: the page's controls (`input_section`: a `ControlsSlot`, or any place with
    `.info`), which say that the network loads instead of showing the previous network's layers and classes
    meanwhile."""
    trust = app_trust()
    cards = find_cards(trust=trust)
    options = network_options(cards)
    st.session_state["network"] = kept_option(
        kept_choice("network", st.session_state.get("network")), options)
    key = st.selectbox(
        "Network", options, key="network", format_func=lambda k: network_label(k, cards),
        on_change=remember_choice, args=("network",),
        help="The built-in ImageNet networks, your own networks (the model cards in the models folder "
        f"{visitor_path(models_dir(), trust)}, set by IBA_MODELS_DIR), or any torchvision classifier.",
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
    with shown_errors():  # a card or weights file that does not fit: its message, no traceback
        shared = shared_model(key, source_version(key, trust), trust)
    if shared is not None and key not in REGISTRY:
        st.caption(source_note(key, shared.network, trust))  # a card relative to the models folder for a visitor
    unusable = [c for c in cards if c.error]
    if unusable:
        st.caption("Model cards in the models folder that cannot be used:  \n"
                   + "  \n".join(f"· {plain(c.name)}: {plain(visitor_text(c.error, trust))}" for c in unusable))
    add_network_form(trust)
    return shared


def torchvision_picker() -> str:
    """A torchvision classifier by name, with where its weights come from; returns torchvision:NAME."""
    names = torchvision_names()
    restore_choice("tv_network", DEFAULT_TORCHVISION)
    if st.session_state["tv_network"] not in names:
        st.session_state["tv_network"] = DEFAULT_TORCHVISION
    name = st.selectbox("torchvision classifier", names, key="tv_network", on_change=remember_choice,
                        args=("tv_network",), help="torchvision's classification networks, with their ImageNet "
                        "weights, class names and preprocessing.")
    st.caption(
        "Pretrained ImageNet weights: downloaded by torchvision where there is internet, else the file must be in "
        f"torch's cache or in the folder IBA_WEIGHTS_DIR names ({weights_dir() or 'not set'})."
    )
    return torchvision_key(name)
