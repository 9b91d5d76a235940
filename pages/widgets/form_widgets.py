"""The settings widgets of a page's form: layer, β·k, class, optimisation, statistics and methods."""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable

import streamlit as st

from iba_core.app import links
from iba_core.errors import UserError
from iba_core.app.choices import BETA_K_CHOICES, DEFAULT_BETA_K, MethodChoices, unavailable_text
from iba_core.app.stats_source import stats_folder, stats_status
from iba_core.app.inputs import EXAMPLE_PROMPTS
from iba_core.heads import PROBABILITY_NOTES, SIMILARITY, default_beta_k
from iba_core.networks import REGISTRY
from iba_core.per_sample import BottleneckSettings
from iba_core.render.text import format_beta, format_target_score
from iba_core.settings import max_stats_samples
from iba_core.trust import visitor_path, visitor_text
from iba_core.feature_stats import app_samples

from pages.widgets.inputs import Inputs, show_domain_warning
from pages.widgets.links import set_link, take_from_link
from pages.widgets.page import app_trust, remember_choice, restore_choice
from pages.widgets.text import plain


def layer_picker(inputs: Inputs, prefix: str, label: str = "Layer") -> str:
    """The layer (its key holds the network's: another network's layers are never offered)."""
    spec = inputs.network.spec
    why = ("paper, Appendix" if spec.key in REGISTRY else
           "the model card's, or the last feature map of at least 28 × 28")
    key = f"{prefix}_layer_{spec.key}"
    linked = take_from_link(inputs.network, "layer")
    if linked is not None:
        st.session_state[key] = linked
    elif st.session_state.get(key) not in spec.layers:
        # no layer kept (or None, seen once in a browser test: the β row then ran "at None" and never ended)
        st.session_state[key] = spec.default_layer
    # set through the session state, so without a default index: Streamlit warns about a widget given both
    layer = st.selectbox(
        label, spec.layers, index=None, key=key,
        format_func=inputs.network.layer_label,  # name · shape (map or tokens)
        help=f"Where the bottleneck sits. Default for this network: {spec.default_layer} ({why}).",
    )
    set_link(layer=layer)
    return layer


def range_picker(inputs: Inputs, prefix: str) -> tuple[str, str]:
    """CoIBA's first and last layer, by the names the layer picker shows (default: `coiba.default_range`); keys
    hold the network's, so another network's layers are never offered. A range CoIBA cannot take is refused on
    Run, in words (`coiba.layer_range`)."""
    from iba_core.coiba import CNN_NOTE, default_range, range_text

    spec, network = inputs.network.spec, inputs.network
    defaults = default_range(network)
    keys = [f"{prefix}_range_{which}_{spec.key}" for which in ("first", "last")]
    linked = take_from_link(network, "layer_range")
    if linked is not None:
        st.session_state.update(zip(keys, linked))
    picked = []
    # one above the other, each as wide as the layer picker: side by side, "block7_1 · 192×7×7 map" was cut off
    for label, default, what, key in zip(
            ("First layer", "Last layer"), defaults,
            ("where the shared mask is drawn and its information counted", "the deepest layer the mask damps"), keys):
        # a value kept from an earlier visit goes without an index (Streamlit warns about both)
        picked.append(st.selectbox(
            label, spec.layers, index=None if key in st.session_state else spec.layers.index(default),
            key=key, format_func=network.layer_label,
            help=f"CoIBA's {label.lower()}: {what}. Default: {defaults[0]} to {defaults[1]}."))
    if picked[0] in spec.layers and network.layout(picked[0]).kind == "map":
        st.caption(CNN_NOTE)  # measured: the paper's β often discards the class on a CNN
    set_link(range=range_text(picked[0], picked[1]))
    return picked[0], picked[1]


def beta_picker(prefix: str, head: str = "softmax", preset: float | None = None) -> float:
    """β·k on its log scale, starting at the default of the network's head (`heads.default_beta_k`: the paper's 10,
    M2IB's 0.1 for a CLIP model's similarity head; each such head keeps its own choice), or at a preset's own
    (`preset`: CoIBA's 1, its authors' β) for a classifier."""
    default = default_beta_k(head)
    key = f"{prefix}_beta" if default == DEFAULT_BETA_K else f"{prefix}_beta_{head}"  # each head its own choice
    if preset is not None and default == DEFAULT_BETA_K:
        default = preset
    linked = take_from_link(None, "beta_k")
    if linked is not None:
        st.session_state[key] = linked
    beta_k = st.select_slider(
        "β·k (information penalty)", options=BETA_K_CHOICES, value=default, format_func=format_beta,
        key=key,
        help="The loss is L_CE + β·L_I with β = (β·k)/k, k = number of feature elements. "
        "Larger β lets fewer bits through. Paper default: β·k = 10"
        + ("; for a CLIP model, M2IB's β = 0.1 on the mean information: β·k = 0.1 (the default here), with the "
           "fitting term −cos(image, prompt) in place of L_CE." if head == SIMILARITY else "."),
    )
    set_link(beta_k=links.to_params(links.View(beta_k=float(beta_k)))["beta_k"])
    return beta_k


def target_picker(inputs: Inputs, prefix: str) -> int | str:
    """A top-5 class (radio), unless a class name or index is typed below (returned as typed)."""
    top = inputs.top5
    key_suffix = f"{inputs.network.key}_{inputs.image.digest}"  # new image → back to its top-1
    other_key, other_for = f"{prefix}_other", f"_{prefix}_other_for"
    if st.session_state.get(other_for, inputs.network.key) != inputs.network.key:
        st.session_state[other_key] = ""  # a class typed for another network names another class here, or none
    st.session_state[other_for] = inputs.network.key
    linked = take_from_link(inputs.network, "target")
    if linked is not None:  # a top-5 class on the radio, any other in the field
        in_top = linked in [i for i, _, _ in top]
        st.session_state[f"{prefix}_target_{key_suffix}" if in_top else other_key] = linked if in_top else str(linked)
    head = inputs.network.head
    if top:
        chosen = st.radio(
            "Class to explain", [i for i, _, _ in top], key=f"{prefix}_target_{key_suffix}",
            format_func=lambda i: next(f"{plain(n)} · {format_target_score(p, head)}" for j, n, p in top if j == i),
            help="The network's five most probable classes for this image, with their probabilities. "
            + PROBABILITY_NOTES[head],
        )
    else:  # a CLIP model before any prompt: only the field below (a prompt typed there is added)
        chosen = None
    n = len(inputs.network.categories)
    if head == SIMILARITY:
        label, example = "…or a text prompt (overrides the choice above)", "e.g. a photo of a dog"
        hint = "A text prompt of this CLIP model: the map explains the image's similarity to it."
    else:
        label = f"…or any {'ImageNet ' if n == 1000 else ''}class (overrides the choice above)"
        example = f"class name or index, e.g. {inputs.network.categories[top[-1][0]]} or {top[-1][0]}"
        hint = (f"A class index 0–{n - 1}, or a class name: the exact name (any case), or a part of one that fits "
                "a single class. A part that fits several classes is refused with the candidates listed.")
    other = st.text_input(label, key=f"{prefix}_other", placeholder=example, help=hint)
    try:
        index = (None if head == SIMILARITY and other.strip() else  # a prompt is added to the network at Run only
                 inputs.network.class_index(other.strip()) if other.strip() else
                 None if chosen is None else int(chosen))
    except UserError:  # an unknown or ambiguous name: Run says why; the link names no class meanwhile
        index = None
    set_link(target=None if index is None else str(index))
    return other.strip() or chosen


def prompt_picker(inputs: Inputs, prefix: str) -> str:
    """A CLIP network's text prompts, one a line (each gets its own map); the box's text as typed (the page turns it
    into prompts with `app.inputs.prompts_from_text` when Run is pressed, so a mistake is said there)."""
    network = inputs.network
    key = f"{prefix}_prompts_{network.key}"
    if key not in st.session_state:  # the network's prompts so far (another page's, a link's), else examples
        st.session_state[key] = "\n".join(getattr(network, "prompts", ()) or EXAMPLE_PROMPTS)
    set_link(target=None)  # a link names a class, never a prompt
    return st.text_area(
        "Text prompts (one a line)", key=key, height=110,
        help="What to look for, e.g. “a watermark” or “a ruler”: for each prompt the bottleneck keeps what makes the "
        "image's embedding similar to the prompt's (M2IB), one map per prompt. " + PROBABILITY_NOTES[network.head],
    )


def advanced_settings(prefix: str, defaults: BottleneckSettings | None = None) -> BottleneckSettings:
    """Steps, batch, learning rate, σ_s and seed inside an expander; `defaults` (the paper's
    BottleneckSettings unless given, e.g. CoIBA's) set the widgets' first values and the kind returned."""
    d = defaults or BottleneckSettings()
    with st.expander("Advanced", icon=":material/tune:"):
        c1, c2 = st.columns(2)
        steps = c1.number_input("Steps T", 1, 200, d.steps, key=f"{prefix}_steps", help="Adam iterations.")
        batch = c2.number_input("Batch B", 1, 64, d.batch, key=f"{prefix}_batch", help="Noisy copies per step.")
        lr = c1.number_input("Learning rate η", 0.001, 10.0, d.lr, step=0.1, format="%.3f", key=f"{prefix}_lr")
        sigma = c2.number_input("Smoothing σ_s", 0.0, 10.0, d.sigma, step=0.5, key=f"{prefix}_sigma",
                                help="Gaussian smoothing of the mask, in feature-map cells.")
        seed = c1.number_input("Seed", 0, 2**31 - 1, d.seed or 0, key=f"{prefix}_seed")
    return replace(d, steps=int(steps), batch=int(batch), lr=float(lr), sigma=float(sigma), seed=int(seed))


def stats_settings(inputs: Inputs, prefix: str, layer: str) -> tuple[str | None, int]:
    """Optional image folder and sample count for the layer statistics μ_R, σ_R."""
    trust = app_trust()  # a served app's visitor sees the card's folder relative to the allowed folder (#40)
    with st.expander("Feature statistics", icon=":material/bar_chart:"):
        st.caption(
            "The bottleneck replaces features by noise with the layer's mean and standard deviation, "
            f"estimated over many images. {plain(visitor_text(stats_status(inputs.network, layer), trust))}"
        )
        card_folder = stats_folder(inputs.network)
        shown_folder = visitor_path(card_folder, trust) if card_folder else None
        folder = st.text_input(
            "Image folder for better statistics (optional)", key=f"{prefix}_folder",
            placeholder=shown_folder or "/path/to/imagenet/val",
            help=(f"Empty: the model card's folder {plain(shown_folder)}. " if card_folder else "")
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


def settings_row(inputs: Inputs, prefix: str, layer: str,
                 defaults: BottleneckSettings | None = None) -> tuple[BottleneckSettings, str | None, int]:
    """The two expanders side by side: optimisation settings (from `defaults`, see `advanced_settings`) and
    feature statistics."""
    left, right = st.columns(2)
    with left:
        settings = advanced_settings(prefix, defaults)
    with right:
        folder, n = stats_settings(inputs, prefix, layer)
    return settings, folder, n


def resolve_target(inputs: Inputs, target: int | str) -> int:
    """Class index for the target widget's value; raises ValueError for an unknown or ambiguous class name (a CLIP
    model: the typed prompt's index, the prompt added; UserError when none is typed)."""
    if target is None:
        raise UserError("Type a text prompt to explain (this CLIP model has none yet), e.g. “a photo of a dog”.")
    return inputs.network.class_index(target)


def method_picker(label: str, key: str, choices: MethodChoices, names: dict[str, str], defaults: Iterable[str],
                  help: str, remember: bool = False) -> list[str]:
    """A multiselect of the methods that can run on this network; the others are listed with their reason.

    A selection kept from another network drops the methods this one cannot run. `remember`: the choice
    survives going to another page and back (`page.remember_choice`).
    """
    if remember:
        restore_choice(key, list(defaults))
    st.session_state[key] = choices.defaults(st.session_state.get(key, defaults))
    methods = st.multiselect(label, choices.keys, key=key, format_func=lambda k: names[k], help=help,
                             on_change=remember_choice if remember else None, args=(key,) if remember else None)
    note = unavailable_text(choices, names)
    if note:
        st.caption(plain(note))  # the reasons name the network by its title
    return methods
