"""The "Add your network" form: a source, weights, class names and preprocessing; checked, then written as a
model card into the models folder."""
from __future__ import annotations

from typing import Any

import streamlit as st

from iba_core.app.models import (
    DEFAULT_ARCH, FOLDER_FILES, NETWORK_SOURCES, FileGiven, NewNetwork, add_network, parse_triple, preview_network,
    torchvision_names,
)
from iba_core.networks import REGISTRY
from iba_core.networks.card_format import BUILTIN_BACKBONES, CROP_RANGE, RESIZE_RANGE
from iba_core.settings import models_dir
from iba_core.trust import ANY, Trust

from pages.widgets.errors import shown_errors
from pages.widgets.page import keep_choice
from pages.widgets.text import plain

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
            ".safetensors), or a whole model folder saved by timm or transformers (a CLIP model too: it explains text "
            "prompts instead of classes). The class names (one a line, in "
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
            "save_pretrained wrote. Its configuration gives the architecture, class names and preprocessing. A CLIP "
            "model's folder also needs its tokenizer's files (tokenizer.json, or vocab.json and merges.txt, with "
            "tokenizer_config.json): save CLIP's processor into the folder too.")
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
            "elsewhere, upload the file. An image folder for the statistics elsewhere is read once the app's owner "
            "names it (or a folder above it) in IBA_DATA_DIRS.")


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
    with shown_errors() as outcome:  # nothing was written
        new = _new_network(form)
        with st.spinner("Checking the network: loading it once…"):
            preview = preview_network(new, trust=trust)
    if outcome.failed:
        return
    st.caption(f"What {plain(preview.name)} would be, read from its files; if it is right, add it.")
    # One line per entry, wrapped: the form sits in the narrow sidebar column, where a table cuts its values off.
    st.markdown("  \n".join(f"**{plain(what)}:** {plain(value)}" for what, value in preview.rows()))


def _add_network(trust: Trust, form: dict[str, Any]) -> None:
    with shown_errors() as outcome:  # nothing was written, the choice stays
        new = _new_network(form)
        with st.spinner("Checking the network: loading its weights and class list…"):
            card = add_network(new, trust=trust)
    if outcome.failed:
        return
    keep_choice("network", str(card))
    st.session_state[ADDED_KEY] = (f"Added {plain(card.stem)}: its model card is {plain(card)}. It is chosen in the "
                                   "Network menu now, on every page.")
    st.rerun()
