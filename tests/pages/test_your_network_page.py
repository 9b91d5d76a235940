"""Your network in the app (issue 12): a model card in the models folder (IBA_MODELS_DIR) is chosen on the pages
and works there; the "Add your network" form writes one; a torchvision classifier without weights says why."""
from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from streamlit.testing.v1 import AppTest

from page_helpers import assert_clean, clean

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from card_fixtures import CLASSES, make_card_folder, make_resnet18, write_card  # noqa: E402
from iba_core.trust import shown  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """The models folder: fruit/ (a 7-class ResNet-18, its class list, 12 images, a card naming them) and
    plain.toml (the same network without an image folder)."""
    root = tmp_path_factory.mktemp("models")
    make_card_folder(root / "fruit")
    write_card(root, name="plain", weights="fruit/fruit.pth", classes="fruit/classes.txt")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("IBA_MODELS_DIR", str(root))
        yield root


@pytest.fixture(scope="module")
def fruit(models: Path) -> str:
    return str((models / "fruit" / "fruit.toml").resolve())


@pytest.fixture(scope="module")
def plain(models: Path) -> str:
    return str((models / "plain.toml").resolve())


@pytest.fixture(scope="module")
def state_dict_bytes() -> bytes:
    buf = io.BytesIO()
    torch.save(make_resnet18().state_dict(), buf)
    return buf.getvalue()



def choose(at: AppTest, card: str) -> AppTest:
    """Pick the card (by its path, the menu's value) in the network menu."""
    return clean(at.selectbox(key="network").set_value(card).run())


def warnings(at: AppTest) -> str:
    return " ".join(w.value for w in at.warning)


def per_sample_run(at: AppTest, steps: int = 2) -> AppTest:
    at.number_input(key="ps_steps").set_value(steps)
    at.number_input(key="ps_batch").set_value(4)
    return clean(at.button(key="ps_run_button").click().run())


# ---- the pages with a card network ----------------------------------------------------------------


def test_the_menu_lists_the_cards_by_name(open_page, fruit, plain) -> None:
    at = open_page("per_sample")
    labels = at.selectbox(key="network").options  # as shown: formatted
    assert "fruit (your network)" in labels and "plain (your network)" in labels
    assert "EfficientNet-Lite0 (offline, pretrained)" in labels
    assert "Any torchvision classifier…" in labels


def test_per_sample_page_runs_on_the_card_network(open_page, fruit, models) -> None:
    at = choose(open_page("per_sample"), fruit)
    captions = " ".join(c.value for c in at.caption)
    assert "Your network from the model card" in captions and "7 classes" in captions
    assert "Out-of-domain" not in warnings(at)  # the card names its image folder
    radio = next(r for r in at.radio if r.key and r.key.startswith("ps_target_"))
    assert len(radio.options) == 5 and all(o.split(" · ")[0] in CLASSES for o in radio.options)

    at = per_sample_run(at)
    record = at.session_state["ps_run"]
    assert record.model_key == "card:fruit" and record.model_title == "fruit (model card)"
    assert record.layer == "layer2" and record.class_name in CLASSES
    heatmap = record.result.heatmap
    assert heatmap.shape == (224, 224) and np.isfinite(heatmap).all() and heatmap.max() > 0
    # Statistics from the card's folder of 12 images, not the sample photos.
    assert str(models / "fruit" / "images") in record.stats_description
    assert record.stats_description.startswith("12 samples")
    assert any(c.key == "ps_heatmap" for c in at.get("plotly_chart"))
    assert "fruit \\(model card\\) · layer layer2" in " ".join(c.value for c in at.caption)  # Markdown-escaped
    assert "card_fruit" in record.file_stem and ":" not in record.file_stem
    assert "add more images to the folder" in record.stats_description  # a folder was given: more of it
    # Another network chosen: the replay stays, and says which network it came from.
    at = clean(at.selectbox(key="network").set_value("efficientnet_lite0").run())
    assert "This run used fruit \\(model card\\)" in " ".join(c.value for c in at.caption)


def test_a_served_per_sample_page_shows_no_absolute_path_of_the_card(open_page, fruit, models, monkeypatch,
                                                                     tmp_path) -> None:
    """Issue #40, item 5: the Per-Sample caption showed the card's absolute path on the server (and the
    statistics' folder); a served app (IBA_DATA_DIRS set, no loopback address) names them relative to the models
    folder."""
    monkeypatch.setenv("IBA_DATA_DIRS", str(tmp_path))
    at = per_sample_run(choose(open_page("per_sample"), fruit))
    texts = [e.value for kind in (at.markdown, at.caption, at.info, at.warning, at.success) for e in kind]
    texts += [w.help or "" for w in at.selectbox] + [w.help or "" for w in at.text_input]
    texts += [w.placeholder or "" for w in at.text_input]
    # the one exception, on purpose: the "Add your network" form names the folders the owner allows typed paths
    # in (IBA_DATA_DIRS), since a visitor must type a path inside them
    texts = [t for t in texts if "Paths typed below are read only inside" not in t]
    assert not [t for t in texts if str(models) in t or str(tmp_path) in t], [t[-300:] for t in texts if "/tmp" in t]
    captions = " ".join(c.value for c in at.caption)
    assert f"model card `{models.name}/fruit/fruit.toml`" in captions
    assert f"{models.name}/fruit/images" in captions  # the statistics' folder, relative too


def test_compare_page_runs_on_the_card_network(open_page, fruit, models, calls) -> None:
    at = choose(open_page("compare"), fruit)
    # Methods that cannot run on it say why; the Readout says what to train.
    assert "LRP" in " ".join(c.value for c in at.caption if "Not available for this network" in c.value)
    assert at.selectbox(key="cmp_readout_card:fruit").value == "—"  # no checkpoint for it
    commands = [c.value for c in at.code]
    assert any(f"python -m iba_core train-readout --model {fruit}" in c for c in commands), commands

    at.multiselect(key="cmp_methods").set_value(["saliency", "grad_cam", "iba_10"])
    at = clean(at.button(key="cmp_run_button").click().run())
    assert [k for k, _ in calls] == ["saliency", "grad_cam", "iba_10"]
    last = at.session_state["cmp_last"]
    iba = at.session_state["map_cache"].get(last.keys[-1]).amap
    assert iba.extra["stats_samples"] == 12  # the Per-Sample IBA reads the card folder's 12 images' statistics
    assert [k[4] for k in last.keys] == ["saliency", "grad_cam", "iba_10"]
    assert last.subject.model == "fruit (model card)" and last.subject.class_name in CLASSES
    cache = at.session_state["map_cache"]
    for key in last.keys:
        values = cache.get(key).amap.values
        assert values.shape == (224, 224) and np.isfinite(values).all()
    assert len(at.image) >= 4  # the input and three maps
    assert any("needs a trained checkpoint" in i.value for i in at.info)


def test_a_card_without_an_image_folder_warns_and_a_folder_given_ends_the_warning(open_page, plain, models,
                                                                                  tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("IBA_DATA_DIRS", str(tmp_path))  # the owner lets visitors name folders in it
    at = choose(open_page("per_sample"), plain)
    assert "Out-of-domain statistics distort the bits" in warnings(at)
    # A folder without a readable image: one sentence, no run.
    (tmp_path / "notes.txt").write_text("not an image")
    at.text_input(key="ps_folder").input(str(tmp_path))
    at.number_input(key="ps_steps").set_value(1)
    at = at.button(key="ps_run_button").click().run()
    assert_clean(at)
    # named relative to the allowed folder (IBA_DATA_DIRS, here the folder itself), never by the server's path
    assert [e.value for e in at.error] == [f"No images (jpg, png, …) found below {tmp_path.name}."]
    assert "ps_run" not in at.session_state
    at.text_input(key="ps_folder").input(str(models / "fruit" / "images"))
    at = per_sample_run(at, steps=1)
    assert "Out-of-domain" not in warnings(at)
    assert "folder" in at.session_state["ps_run"].stats_description


def test_beta_layer_and_evaluate_pages_work_with_the_card_network(open_page, fruit) -> None:
    at = choose(open_page("beta_layer"), fruit)
    at.number_input(key="bl_steps").set_value(1)
    at.number_input(key="bl_batch").set_value(2)
    at = clean(at.button(key="bl_run_button").click().run())
    grid = at.session_state["bl_grids"][at.session_state["bl_last"]]
    assert grid.subject.model == "fruit (model card)" and all(np.isfinite(c.heatmap).all() for c in grid.cells)

    at = clean(at.switch_page("pages/evaluate.py").run())
    at.multiselect(key="ev_methods").set_value(["saliency", "grad_cam"])
    at.number_input(key="ev_points").set_value(3)
    at = clean(at.button(key="ev_deg_button").click().run())
    assert set(at.session_state["ev_degradation"].curves) == {"saliency", "grad_cam"}
    at.slider(key="ev_san_levels").set_value(2)
    at = clean(at.button(key="ev_san_button").click().run())
    assert at.session_state["ev_sanity"].strip.levels == ["fc", "layer4.1.bn2"]  # module by module


def test_a_torchvision_classifier_without_weights_offline_says_so(open_page, monkeypatch, tmp_path) -> None:
    import iba_core.networks.weights as weights

    monkeypatch.setattr(weights, "_reachable", lambda url, timeout=3.0: False)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.delenv("IBA_WEIGHTS_DIR", raising=False)
    at = open_page("per_sample")
    at = at.selectbox(key="network").set_value("torchvision:").run()
    assert_clean(at)
    assert at.selectbox(key="tv_network").value == "resnet18"
    assert "IBA_WEIGHTS_DIR" in " ".join(c.value for c in at.caption)
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "not on this machine" in errors[0] and "resnet18-f37072fd.pth" in errors[0]
    assert any("Choose a usable image and network" in i.value for i in at.info)


# ---- the "Add your network" form -------------------------------------------------------------------


def fill_form(at: AppTest, name: str, weights: tuple[str, bytes], classes: list[str], **fields: str) -> AppTest:
    at.text_input(key="add_name").input(name)
    at.selectbox(key="add_arch").set_value("resnet18")
    at.file_uploader(key="add_weights").set_value((weights[0], weights[1], "application/octet-stream"))
    at.file_uploader(key="add_classes").set_value(("classes.txt", "\n".join(classes).encode(), "text/plain"))
    for key, value in fields.items():
        at.text_input(key=f"add_{key}").input(value)
    return at.button(key="add_network_button").click().run()


def test_the_form_writes_a_card_and_chooses_it(open_page, models, state_dict_bytes) -> None:
    at = open_page("per_sample")
    images = str(models / "fruit" / "images")
    at = clean(fill_form(at, "berries", ("my model.pth", state_dict_bytes), CLASSES, images=images, layer="layer3",
                         mean="0.5, 0.5, 0.5", std="0.25 0.25 0.25"))
    card = models / "berries" / "berries.toml"
    assert card.is_file() and (models / "berries" / "berries.pth").is_file()
    assert (models / "berries" / "classes.txt").read_text().split() == CLASSES
    assert not [p for p in models.iterdir() if p.name.startswith(".")]  # no working folder left
    assert any("Added berries" in s.value for s in at.success)
    assert at.selectbox(key="network").value == str(card.resolve())

    from iba_core.networks import read_card
    from iba_core.trust import Trust

    written = read_card(card, Trust.for_app())  # its image folder lies in the models folder, outside the card's
    assert written.arch == "torchvision:resnet18" and written.layer == "layer3"
    assert str(written.stats_images) == images and written.preprocess["mean"] == (0.5, 0.5, 0.5)
    assert "default layer layer3" in " ".join(c.value for c in at.caption)


def test_a_refused_upload_keeps_the_previous_state(open_page, models, fruit, state_dict_bytes, tmp_path,
                                                   monkeypatch) -> None:
    monkeypatch.setenv("IBA_DATA_DIRS", str(tmp_path))
    at = per_sample_run(choose(open_page("per_sample"), fruit), steps=1)
    before = at.session_state["ps_run"].run_id
    listing = sorted(p.name for p in models.iterdir())

    # A class list of the wrong length: the library's message, nothing written, the previous result kept.
    at = fill_form(at, "wrong", ("fruit.pth", state_dict_bytes), CLASSES[:5])
    assert_clean(at)
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "The class list has 5 names but the weights' output layer has 7 outputs" in errors[0]
    assert sorted(p.name for p in models.iterdir()) == listing
    assert at.session_state["ps_run"].run_id == before
    assert at.session_state["network"] == fruit
    assert not at.success

    # A whole pickled model is never unpickled by the app.
    whole = io.BytesIO()
    torch.save(make_resnet18(), whole)
    at = fill_form(at, "pickled", ("model.pt", whole.getvalue()), CLASSES)
    assert_clean(at)
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "pickled Python objects" in errors[0] and "refused" in errors[0]
    assert "--trust-pickle" not in errors[0] and "model.pt" in errors[0] and ".adding-" not in errors[0]
    assert sorted(p.name for p in models.iterdir()) == listing
    assert at.session_state["ps_run"].run_id == before

    # A name already taken and an image folder without images: one sentence each.
    empty = tmp_path / "empty"
    empty.mkdir()
    at = fill_form(at, "fruit", ("fruit.pth", state_dict_bytes), CLASSES)
    assert "exists already" in " ".join(e.value for e in at.error)
    at = fill_form(at, "other", ("fruit.pth", state_dict_bytes), CLASSES, images=str(empty))
    assert "holds no images" in " ".join(e.value for e in at.error)
    assert sorted(p.name for p in models.iterdir()) == listing
    assert at.session_state["ps_run"].run_id == before


def test_the_form_adds_a_timm_network_after_showing_what_it_read(open_page, models) -> None:
    """Source "timm model": the architecture by name, an uploaded state_dict and class list; "Check" shows what was
    read and adds nothing, "Add network" writes the card and chooses it."""
    import timm

    torch.manual_seed(3)
    buf = io.BytesIO()
    torch.save(timm.create_model("resnet18", num_classes=3).state_dict(), buf)
    at = open_page("per_sample")
    at.radio(key="add_source").set_value("timm")
    at = clean(at.run())
    assert "add_arch" not in {s.key for s in at.selectbox}  # the torchvision choice gives way to timm's name field
    at.text_input(key="add_name").input("pets")
    at.text_input(key="add_timm_arch").input("resnet18")
    at.file_uploader(key="add_weights").set_value(("pets.pth", buf.getvalue(), "application/octet-stream"))
    at.file_uploader(key="add_classes").set_value(("pets.txt", b"cat\ndog\nparrot\n", "text/plain"))
    at.number_input(key="add_resize").set_value(72)
    at.number_input(key="add_crop").set_value(64)  # a small crop keeps the page quick
    listing = sorted(p.name for p in models.iterdir())

    at = clean(at.button(key="add_check_button").click().run())
    shown = next(m.value for m in at.markdown if m.value.startswith("**Source:**"))
    read = {what: re.sub(r"\\(.)", r"\1", value)  # the page escapes Markdown in what the files said
            for what, value in (line.removeprefix("**").split(":** ", 1) for line in shown.split("  \n"))}
    assert read["Source"] == "timm model: resnet18" and read["Classes"] == "3: cat, dog, parrot (from your class list)"
    assert read["Input"].startswith("resize the short side to 72 px, centre crop 64 px")
    assert sorted(p.name for p in models.iterdir()) == listing  # checked, nothing added

    at = clean(at.button(key="add_network_button").click().run())
    card = models / "pets" / "pets.toml"
    assert card.is_file() and at.selectbox(key="network").value == str(card.resolve())
    assert any("Added pets" in s.value for s in at.success)
    assert "3 classes" in " ".join(c.value for c in at.caption)


def test_a_typed_folder_outside_the_owners_folders_is_not_scanned(open_page, plain, monkeypatch) -> None:
    monkeypatch.delenv("IBA_DATA_DIRS", raising=False)
    at = choose(open_page("per_sample"), plain)
    at.text_input(key="ps_folder").input("/usr")
    at.number_input(key="ps_steps").set_value(1)
    at = at.button(key="ps_run_button").click().run()
    assert_clean(at)
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and "/usr is outside the folders this app may read" in errors[0], errors
    assert "IBA_DATA_DIRS" in errors[0] and "ps_run" not in at.session_state


# ---- a card's words are text, not Markdown -----------------------------------------------------------------

EVIL_TITLE = "[click](http://evil) **x**"


def test_a_cards_title_and_class_names_show_as_text_not_markdown(open_page, tmp_path, monkeypatch) -> None:
    """A visitor's card reaches every visitor: its title and class names are escaped wherever the pages
    render Markdown (captions, notes, the target choice), so they show as typed and never as a link."""
    from pages.widgets.text import plain

    root = tmp_path / "models"
    folder = make_card_folder(root / "evil")
    names = [f"[c{i}](http://evil) *x*" for i in range(len(CLASSES))]
    (folder / "classes.txt").write_text("\n".join(names) + "\n")
    (folder / "fruit.toml").write_text((folder / "fruit.toml").read_text() + f'title = "{EVIL_TITLE}"\n')
    monkeypatch.setenv("IBA_MODELS_DIR", str(root))
    card = str((folder / "fruit.toml").resolve())

    at = choose(open_page("compare"), card)
    escaped = plain(EVIL_TITLE)
    assert escaped == "\\[click\\]\\(http\u2060\\://evil\\) \\*\\*x\\*\\*"  # (a word joiner breaks the URL)
    note = next(m.value for m in at.markdown if m.value.startswith("No Readout Bottleneck checkpoint for"))
    assert escaped in note and EVIL_TITLE not in note
    texts = [e.value for kind in (at.markdown, at.caption, at.info, at.warning, at.error) for e in kind]
    assert not any("](http" in t for t in texts), [t for t in texts if "](http" in t]
    # The target choice (a radio's labels are Markdown) and the crop's caption show the names escaped.
    radio = next(r for r in at.radio if r.key and r.key.startswith("cmp_target_"))
    labels = radio.options  # as shown: formatted
    assert labels and all("](http" not in label and "\\[c" in label for label in labels), labels
    captions = [c for im in at.image for c in im.captions if "Top prediction" in c]
    assert captions and all("\\[c" in c and "](http" not in c for c in captions), captions


# ---- the owner's statistics folder (issue #28.7) -----------------------------------------------------------


@pytest.fixture
def served_at(monkeypatch):
    """Set the address the app listens on (Streamlit's server.address, which `app_trust` reads), undone after."""
    from streamlit import config

    before = config.get_option("server.address")

    def serve(address: str | None) -> None:
        config.set_option("server.address", address)

    yield serve
    config.set_option("server.address", before)


@pytest.fixture
def own_images(tmp_path) -> Path:
    """The expert's own image folder: outside the models folder, not named in IBA_DATA_DIRS."""
    from PIL import Image

    folder = tmp_path / "my_photos"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(4):
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(folder / f"p{i}.png")
    return folder


def test_on_loopback_the_form_reads_the_owners_statistics_folder(open_page, models, state_dict_bytes, own_images,
                                                                 served_at, monkeypatch) -> None:
    monkeypatch.delenv("IBA_DATA_DIRS", raising=False)
    monkeypatch.delenv("IBA_TRUST_CODE", raising=False)
    served_at("127.0.0.1")
    at = open_page("per_sample")
    assert "read on this machine" in " ".join(c.value for c in at.caption)
    at = clean(fill_form(at, "expert", ("model.pth", state_dict_bytes), CLASSES, images=str(own_images)))
    card = models / "expert" / "expert.toml"
    assert card.is_file() and any("Added expert" in s.value for s in at.success)
    assert at.selectbox(key="network").value == str(card.resolve())
    # The statistics come from the folder: the page says so, and no warning about the sample photos.
    captions = " ".join(c.value for c in at.caption).replace("\\", "")
    assert f"model card's folder {own_images.resolve()}" in captions
    assert "offline sample photos" not in warnings(at)


def test_an_app_serving_other_machines_refuses_the_folder_naming_the_one_setting(open_page, models,
                                                                                 state_dict_bytes, own_images,
                                                                                 served_at, monkeypatch) -> None:
    monkeypatch.delenv("IBA_DATA_DIRS", raising=False)
    monkeypatch.delenv("IBA_TRUST_CODE", raising=False)
    served_at("0.0.0.0")
    listing = sorted(p.name for p in models.iterdir())
    at = fill_form(open_page("per_sample"), "expert2", ("model.pth", state_dict_bytes), CLASSES,
                   images=str(own_images))
    assert_clean(at)
    errors = [e.value.replace("\\", "") for e in at.error]
    assert len(errors) == 1 and f"{shown(own_images)} is outside the folders this app may read" in errors[0], errors
    assert "IBA_DATA_DIRS" in errors[0] and "IBA_TRUST_CODE" not in errors[0] and "pload" not in errors[0]
    assert sorted(p.name for p in models.iterdir()) == listing  # nothing added, nothing run on other statistics
    assert not at.success
    assert "image folder for the statistics elsewhere is read once the app's owner names it" in \
        " ".join(c.value for c in at.caption)


def test_a_folder_typed_for_the_weights_file_says_to_choose_the_file_inside_it(open_page, models, state_dict_bytes,
                                                                             tmp_path, served_at, monkeypatch) -> None:
    monkeypatch.delenv("IBA_DATA_DIRS", raising=False)
    served_at("localhost")
    chosen = tmp_path / "checkpoints"
    chosen.mkdir()
    (chosen / "best.safetensors").write_bytes(b"")
    (chosen / "last.pth").write_bytes(b"")
    at = fill_form(open_page("per_sample"), "lesions", ("model.pth", state_dict_bytes), CLASSES,
                   weights_path=str(chosen))
    assert_clean(at)
    errors = [e.value.replace("\\", "") for e in at.error]
    assert len(errors) == 1 and errors[0].startswith(
        f"{shown(chosen)} is a folder; choose the weights file inside it (best.safetensors, last.pth)."), errors
    assert not (models / "lesions").exists()
