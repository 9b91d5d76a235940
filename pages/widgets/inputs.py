"""The pages' input section: image and network on the left, the page's controls on the right."""
from __future__ import annotations

from dataclasses import dataclass, replace

import streamlit as st
import torch
from PIL import Image
from streamlit.delta_generator import DeltaGenerator

from iba_core.app import links
from iba_core.app.choices import DEFAULT_SAMPLE
from iba_core.app.inputs import (
    MAX_UPLOAD_MB, ImageInput, sample_input, shown_note, size_warnings, upload_input, upload_types_text,
)
from iba_core.app.state import SharedModel, Subject
from iba_core.app.stats_source import domain_warning
from iba_core.heads import PROBABILITY_NOTES, SIMILARITY
from iba_core.images import ImageError, sample_image_names
from iba_core.networks import Network
from iba_core.render.text import format_probability, format_target_score

from pages.widgets.errors import show_error
from pages.widgets.links import (
    CHOSEN_KEY, LINK_PENDING_KEY, LINK_PROBLEMS_KEY, LINK_SLOT_KEY, NETWORK_CHOICE_KEY, STEP_NOTE_KEY, fit_link,
    keep_for_links, link_section, read_link, result_note_line, set_link,
)
from pages.widgets.network_picker import CONTROLS_FOR_KEY, network_picker
from pages.widgets.page import (
    SOURCES, app_trust, forget_choice, keep_choice, kept_choice, remember_choice, restore_choice,
)
from pages.widgets.progress import network_turn
from pages.widgets.text import plain


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


def _forget_cleared_upload() -> None:
    if st.session_state.get("upload") is None:
        forget_choice("upload")


def image_picker(network: Network | None = None) -> ImageInput | None:
    """Sample photo or upload, read for `network`'s input channels (RGB without one); a refused upload shows
    st.error and returns None."""
    pre = network.preprocess if network is not None else None
    channels, bands = (pre.channels, pre.display_bands) if pre is not None else (3, None)
    types = upload_types_text(channels)
    restore_choice("image_source", SOURCES[0])
    source = st.radio(
        "Image", SOURCES, key="image_source", horizontal=True, on_change=remember_choice, args=("image_source",)
    )
    if source == SOURCES[0]:
        restore_choice("sample_name", DEFAULT_SAMPLE)
        name = st.selectbox(
            "Sample photo", sample_image_names(), key="sample_name", on_change=remember_choice, args=("sample_name",),
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
        keep_choice("upload", (uploaded.name, data))  # so the other page can reuse it
        keep_for_links(uploaded.name, data, chosen.digest)
        _format_caption(chosen)
        return chosen
    kept = kept_choice("upload")
    if kept is not None:
        st.caption(f"Using **{plain(kept[0])}**, uploaded earlier.")
        try:  # (read for this network: an earlier upload may not fit its channels)
            chosen = upload_input(*kept, channels=channels, display_bands=bands)
        except ImageError as err:
            show_error(err)
            return None
        keep_for_links(*kept, chosen.digest)  # (opened from a link: kept again if removed meanwhile)
        _format_caption(chosen)
        return chosen
    st.info(f"Choose an image file to upload ({types}), or pick a sample photo.",
            icon=":material/upload:")
    return None


def _format_caption(chosen: ImageInput) -> None:
    note = chosen.format_note
    if note:
        st.caption(note)


class ControlsSlot:
    """The page's controls' place in the right column, made when first needed: an st.empty where the image or the
    network changed (cleared, or saying that a network loads, so no layer or class of the previous one stays on
    screen meanwhile), else a plain container at the same place. An st.empty sent again at every run first clears
    its place: every widget of the controls was mounted anew at each rerun, so the one in use lost its focus (the
    replay slider's arrow keys moved the page after one step)."""

    def __init__(self, column: DeltaGenerator):
        self.column, self.slot = column, None

    def emptied(self) -> DeltaGenerator:
        """The place as an st.empty, cleared (made now, or its content so far removed)."""
        if self.slot is None:
            self.slot = self.column.empty()
        else:
            self.slot.empty()
        return self.slot

    def info(self, *args, **kwargs) -> None:
        """A note in the emptied place (a network loads)."""
        self.emptied().info(*args, **kwargs)

    def container(self) -> DeltaGenerator:
        """The controls' container: in the emptied place when there is one, else straight in the column."""
        return (self.slot or self.column).container()


def input_section(widths: tuple[float, float] = (2, 3)) -> Inputs | None:
    """Image and network on the left, the page's controls on the right (Inputs.controls).

    widths: relative widths of the two columns. Returns None when the image or the network is
    unavailable; the reason is shown as st.error. Images that preprocessing blows up or crops hard
    get a warning under the crop.
    """
    st.session_state.pop(LINK_SLOT_KEY, None)  # (this run's, made below: never write into a previous run's)
    st.session_state.pop(STEP_NOTE_KEY, None)
    read_link(app_trust())
    link_note = st.empty()  # what of the page's link could not be used
    left, right = st.columns(list(widths), gap="large")
    # The page's controls, in one slot: emptied (or saying that a network loads) while another image or
    # network is set up, so no layer or class of the previous one stays on screen meanwhile (`ControlsSlot`).
    slot = ControlsSlot(right)
    with left:
        image, shared, stats_note = _image_and_network(slot)
    _link_to_choices(image, shared, link_note)
    if image is None or shared is None:
        slot.info("Choose a usable image and network on the left to set up a run.", icon=":material/arrow_back:")
        st.session_state.pop(CONTROLS_FOR_KEY, None)
        return None
    network = shared.network
    show_domain_warning(stats_note, network)
    cropped = network.preprocess.crop(image.image)
    x = network.preprocess.normalise(cropped)
    right, top5, present = _predictions(slot, shared, image, x)
    with left:
        _crop_view(image, network, cropped, top5, present)
    return Inputs(image, shared, cropped, x, top5, right, stats_note)


def _image_and_network(slot: ControlsSlot) -> tuple[ImageInput | None, SharedModel | None, DeltaGenerator]:
    """The image and the network pickers, the link's section below them; returns (image, network, its stats note)."""
    # The image is shown above the network but read after it: its channels are the network's (a gray or a
    # multi-band network reads a .npy or TIFF of its own bands).
    image_slot = st.container()
    shared = network_picker(slot)
    stats_note = st.empty()
    with image_slot:
        image = image_picker(shared.network if shared is not None else None)
    pending = st.session_state.get(LINK_PENDING_KEY)
    link_section(pending[0].step if pending is not None else None)
    return image, shared, stats_note


def _link_to_choices(image: ImageInput | None, shared: SharedModel | None, link_note: DeltaGenerator) -> None:
    """The page's link follows the image and network chosen; what of an opened link could not be used is said."""
    st.session_state[CHOSEN_KEY] = (image.name if image is not None else None,
                                    image.digest if image is not None else None,
                                    shared.network.spec.title if shared is not None else None)
    if shared is None:  # the chosen network did not load: the link names it, and no layer or class of another
        set_link(image=links.image_value(image) if image is not None else None,
                 network=st.session_state.get(NETWORK_CHOICE_KEY), layer=None, target=None, step=None)
    else:
        set_link(image=links.image_value(image) if image is not None else None, network=shared.network.key)
    if shared is not None:
        fit_link(shared.network)
    problems = st.session_state.pop(LINK_PROBLEMS_KEY, None)
    if problems:
        link_note.warning("This link could not be opened in full. " + " ".join(plain(p) for p in problems),
                          icon=":material/link_off:")


def _predictions(slot: ControlsSlot, shared: SharedModel, image: ImageInput, x: torch.Tensor
                 ) -> tuple[DeltaGenerator, list[tuple[int, str, float]], list[tuple[int, str, float]] | None]:
    """(the controls' container, the network's top-5, a multi-label network's labels above 50 % or None)."""
    network = shared.network
    shown_for = (shared.source, image.digest)
    if st.session_state.get(CONTROLS_FOR_KEY) != shown_for:
        slot.emptied()  # another image: its classes come with its top-5, none of the previous image's meanwhile
    right = slot.container()
    with right, network_turn(shared):
        # a CLIP model before any prompt has no outputs to rank (its prompts are typed in the page's form)
        top5 = network.top_k(x, 5) if network.head != SIMILARITY or getattr(network, "prompts", ()) else []
        # a multi-label network sees every label above 50 %, not just its top one
        present = network.labels_above(x) if network.head == "sigmoid" else None
    st.session_state[CONTROLS_FOR_KEY] = shown_for
    return right, top5, present


def _crop_view(image: ImageInput, network: Network, cropped: Image.Image, top5: list[tuple[int, str, float]],
               present: list[tuple[int, str, float]] | None) -> None:
    """The crop the network sees, captioned with its prediction, and warnings where preprocessing distorts it."""
    size = network.preprocess.crop_size
    labels = "" if present is None else (
        " · Labels above 50 %: " + (", ".join(f"{plain(n)} ({format_probability(p)})" for _, n, p in present)
                                    or "none") + ". " + PROBABILITY_NOTES[network.head])
    shown = shown_note(cropped, network.preprocess.channels)  # a gray image, or which bands make the colours
    st.image(cropped.convert("RGB"), width=224, caption=(
        f"The {size} × {size} centre crop the network sees{'; ' + shown if shown else ''}. "
        + prediction_text(network.head, top5) + labels
    ))
    for warning in size_warnings(image.image.size, network.preprocess.resize, network.preprocess.crop_size):
        st.warning(warning, icon=":material/crop:")


def prediction_text(head: str, top: list[tuple[int, str, float]]) -> str:
    """The crop's caption on what the network sees: its top prediction, or for a CLIP model (similarity head) the
    prompt most similar to the image so far (none before a prompt is typed)."""
    if head == SIMILARITY:
        if not top:
            return "A CLIP model: it explains the text prompts typed beside it, one map each."
        return (f"Most similar of the prompts so far: “{plain(top[0][1])}” (similarity "
                f"{format_target_score(top[0][2], head)}, a cosine).")
    return f"Top prediction: {plain(top[0][1])} ({format_probability(top[0][2])})"


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
