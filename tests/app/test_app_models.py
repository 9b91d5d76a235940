"""iba_core.app.models (the network menu, adding a network from uploaded files), the models folder setting,
cards.write_card, and the app's statistics, map keys, readout hint and sanity check for a model card's network."""
from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from iba_core.methods import get_method  # noqa: E402
from card_fixtures import CLASSES, make_card_folder, make_resnet18, write_card as write_test_card  # noqa: E402

from iba_core import settings  # noqa: E402
from iba_core.app import models  # noqa: E402
from iba_core.app.models import FileGiven, NewNetwork, add_network  # noqa: E402
from iba_core.errors import UserError  # noqa: E402
from iba_core.networks import ModelCardError, UnsafeWeightsError, WeightsMismatchError, read_card  # noqa: E402
from iba_core.networks.card_format import card_text, write_card  # noqa: E402
from iba_core.trust import NotTrustedError, Trust  # noqa: E402


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return make_card_folder(tmp_path_factory.mktemp("app-card") / "fruit")


@pytest.fixture(scope="module")
def card_net(folder):
    from iba_core.networks import load_network

    return load_network(str(folder / "fruit.toml"))


@pytest.fixture(scope="module")
def state_bytes() -> bytes:
    buf = io.BytesIO()
    torch.save(make_resnet18().state_dict(), buf)
    return buf.getvalue()


def new_network(state_bytes: bytes, name: str = "berries", classes: list[str] = CLASSES, **fields) -> NewNetwork:
    return NewNetwork(name=name, arch=fields.pop("arch", "resnet18"),
                      weights=fields.pop("weights", FileGiven.upload("model.pth", state_bytes)),
                      classes=FileGiven.upload("classes.txt", "\n".join(classes).encode()), **fields)


# ---- the models folder and the menu ----------------------------------------------------------------


def test_models_dir_follows_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv(settings.MODELS_DIR_ENV, raising=False)
    assert settings.models_dir() == Path.home() / ".config" / "iba-explorer" / "models"
    monkeypatch.setenv(settings.MODELS_DIR_ENV, str(tmp_path))
    assert settings.models_dir() == tmp_path


def test_find_cards_lists_usable_cards_and_says_why_others_cannot_be_used(tmp_path, folder, monkeypatch) -> None:
    root = tmp_path / "models"
    root.mkdir()
    write_test_card(root, name="direct", weights=str(folder / "fruit.pth"), classes=str(folder / "classes.txt"))
    (root / "sub").mkdir()
    write_test_card(root / "sub", name="nested", weights=str(folder / "fruit.pth"), classes=None)
    (root / "broken.toml").write_text("arch = [unclosed\n")
    (root / ".adding-x-1234").mkdir()
    write_test_card(root / ".adding-x-1234", name="half")  # a working folder: never listed
    monkeypatch.setenv(settings.MODELS_DIR_ENV, str(root))
    monkeypatch.delenv(settings.DATA_DIRS_ENV, raising=False)
    monkeypatch.delenv(settings.TRUST_CODE_ENV, raising=False)

    # The cards name files outside the models folder: unusable in the app until its owner allows that folder.
    outside = {c.name: c.error for c in models.find_cards()}
    assert "outside the model card's folder" in outside["direct"] and settings.DATA_DIRS_ENV in outside["direct"]
    assert models.network_options(models.find_cards()) == [*models.REGISTRY, models.TORCHVISION_CHOICE]
    monkeypatch.setenv(settings.DATA_DIRS_ENV, str(folder))

    cards = models.find_cards()
    assert [c.name for c in cards] == ["broken", "direct", "nested"]
    broken = cards[0]
    assert broken.error and "not valid TOML" in broken.error
    options = models.network_options(cards)
    assert options[:3] == ["efficientnet_lite0", "resnet50", "vgg16"]
    assert options[3:] == [str((root / "direct.toml").resolve()), str((root / "sub" / "nested.toml").resolve()),
                           models.TORCHVISION_CHOICE]
    assert models.network_label(options[3], cards) == "direct (your network)"
    assert models.network_label(models.TORCHVISION_CHOICE, cards) == "Any torchvision classifier…"
    assert models.network_label("resnet50", cards).startswith("ResNet-50")
    # A choice kept from before that is gone (a removed card) falls back to the default network.
    assert models.kept_option(options[4], options) == options[4]
    assert models.kept_option("/gone/card.toml", options) == "efficientnet_lite0"
    assert models.find_cards(tmp_path / "missing") == []


def test_source_version_changes_with_the_card(tmp_path, folder) -> None:
    card = write_test_card(tmp_path, weights=str(folder / "fruit.pth"), classes=None)
    first = models.source_version(str(card))
    assert first > 0 and models.source_version("resnet50") == 0
    card.write_text(card.read_text() + 'title = "Fruit"\n')
    import os

    os.utime(card, ns=(first + 10**9, first + 10**9))
    assert models.source_version(str(card)) != first


def test_parse_triple() -> None:
    assert models.parse_triple("0.485, 0.456, 0.406", "mean") == (0.485, 0.456, 0.406)
    assert models.parse_triple("[0.5 0.5 0.5]", "mean") == (0.5, 0.5, 0.5)
    assert models.parse_triple("  ", "mean") is None
    with pytest.raises(UserError, match="three numbers"):
        models.parse_triple("0.5, 0.5", "mean")
    with pytest.raises(UserError, match="positive"):
        models.parse_triple("0.2, 0, 0.2", "std")


# ---- writing a card ----------------------------------------------------------------------------------


def test_write_card_round_trips_every_entry(tmp_path, folder) -> None:
    outside = Trust.local(code=True)  # the card names files in another folder: allowed like code
    card = write_card(tmp_path / "mine.toml", name="mine", title='My "fine" net', arch="torchvision:resnet18",
                      weights=folder / "fruit.pth", classes=str(folder / "classes.txt"), layer="layer3",
                      stats_images=folder / "images", trust=outside,
                      preprocess={"resize": 288, "crop": 256, "mean": (0.5, 0.5, 0.5), "std": [0.2, 0.2, 0.2]})
    assert card.name == "mine" and card.title == 'My "fine" net' and card.layer == "layer3"
    assert card.weights == (folder / "fruit.pth").resolve() and card.stats_images == (folder / "images").resolve()
    assert card.preprocess == {"resize": 288, "crop": 256, "mean": (0.5, 0.5, 0.5), "std": (0.2, 0.2, 0.2)}
    assert read_card(tmp_path / "mine.toml", outside).arch == "torchvision:resnet18"
    assert "[preprocess]" in card_text(arch="torchvision:resnet18", preprocess={"crop": 224})
    assert "[preprocess]" not in card_text(arch="torchvision:resnet18", preprocess={"crop": None})


def test_write_card_leaves_nothing_when_the_card_is_refused(tmp_path) -> None:
    with pytest.raises(ModelCardError, match="does not exist"):
        write_card(tmp_path / "bad.toml", arch="torchvision:resnet18", weights="missing.pth")
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ModelCardError, match=r"ends in \.toml"):
        write_card(tmp_path / "bad.txt", arch="torchvision:resnet18")
    # A path outside the card's folder, without the trust that allows it (the default, the local user's).
    elsewhere = tmp_path / "elsewhere.txt"
    elsewhere.write_text("a\nb\n")
    with pytest.raises(NotTrustedError, match="leads outside the model card's folder"):
        write_card(tmp_path / "sub" / "out.toml", arch="torchvision:resnet18", classes=str(elsewhere))
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["elsewhere.txt", "sub"]


# ---- adding a network ---------------------------------------------------------------------------------


def test_add_network_writes_a_card_that_loads(tmp_path, folder, state_bytes, monkeypatch) -> None:
    from iba_core.networks import load_network

    monkeypatch.setenv(settings.DATA_DIRS_ENV, str(folder))  # the owner lets visitors name files in it
    root = tmp_path / "models"
    card = add_network(new_network(state_bytes, stats_images=str(folder / "images"), layer="layer3",
                                   title="Berries", preprocess={"crop": 192, "resize": None}), root)
    assert card == root / "berries" / "berries.toml"
    assert sorted(p.name for p in card.parent.iterdir()) == ["berries.pth", "berries.toml", "classes.txt"]
    assert [p.name for p in root.iterdir()] == ["berries"]
    net = load_network(str(card), trust=Trust.for_app())  # its image folder: in IBA_DATA_DIRS, not beside it
    assert net.key == "card:berries" and net.categories == CLASSES and net.spec.default_layer == "layer3"
    assert net.spec.title == "Berries" and net.spec.crop == 192
    assert net.spec.stats_images == str((folder / "images").resolve())
    # A weights file on this machine (too large to upload) is copied in.
    local = add_network(new_network(state_bytes, name="local", weights=FileGiven.local(folder / "fruit.pth"),
                                    arch="torchvision:resnet18"), root)
    assert (local.parent / "local.pth").read_bytes() == (folder / "fruit.pth").read_bytes()


@pytest.mark.parametrize("case, error, message", [
    ("classes", WeightsMismatchError, "The class list has 5 names but the weights' output layer has 7 outputs"),
    ("arch", WeightsMismatchError, "do not fit"),
    ("pickled", UnsafeWeightsError, "pickled Python objects"),
    ("torchscript", UnsafeWeightsError, "TorchScript archive"),
    ("layer", Exception, "has no layer 'nolayer'"),
    ("name", ModelCardError, "name of letters"),
    ("taken", ModelCardError, "exists already"),
    ("suffix", ModelCardError, "not a .pth, .pt or .safetensors"),
    ("no weights", ModelCardError, "Give the weights file"),
    ("images", ModelCardError, "holds no images"),
    ("no folder", ModelCardError, "does not exist"),
    ("unknown arch", ModelCardError, "no classification network"),
])
def test_add_network_refusals_leave_the_folder_as_it_was(case, error, message, tmp_path, state_bytes,
                                                         monkeypatch) -> None:
    monkeypatch.setenv(settings.DATA_DIRS_ENV, str(tmp_path))
    root = tmp_path / "models"
    root.mkdir()
    (root / "taken").mkdir()
    kwargs: dict = {}
    classes = CLASSES
    if case == "classes":
        classes = CLASSES[:5]
    elif case == "arch":
        kwargs["arch"] = "resnet34"
    elif case == "pickled":
        buf = io.BytesIO()
        torch.save(make_resnet18(), buf)
        kwargs["weights"] = FileGiven.upload("whole.pt", buf.getvalue())
    elif case == "torchscript":
        buf = io.BytesIO()
        torch.jit.save(torch.jit.script(torch.nn.Linear(2, 2)), buf)
        kwargs["weights"] = FileGiven.upload("scripted.pt", buf.getvalue())
    elif case == "layer":
        kwargs["layer"] = "nolayer"
    elif case == "suffix":
        kwargs["weights"] = FileGiven.upload("model.onnx", state_bytes)
    elif case == "no weights":
        kwargs["weights"] = None
    elif case == "images":
        (tmp_path / "empty").mkdir()
        (tmp_path / "empty" / "notes.txt").write_text("no images here")
        kwargs["stats_images"] = str(tmp_path / "empty")
    elif case == "no folder":
        kwargs["stats_images"] = str(tmp_path / "nowhere")
    elif case == "unknown arch":
        kwargs["arch"] = "resnet_unknown"
    name = {"name": "two words", "taken": "taken"}.get(case, "berries")
    with pytest.raises(error, match=message) as info:
        add_network(new_network(state_bytes, name=name, classes=classes, **kwargs), root)
    assert ".adding-" not in str(info.value)  # files are named as the user gave them
    assert sorted(p.name for p in root.iterdir()) == ["taken"]


# ---- a card network in the app's statistics, map keys, readout hint and sanity check -------------------


def test_statistics_come_from_the_card_folder(card_net, folder) -> None:
    from iba_core.app import stats_source

    assert stats_source.stats_folder(card_net) == str(folder.resolve() / "images")
    assert stats_source.stats_folder(card_net, "/elsewhere") == "/elsewhere"
    assert stats_source.domain_warning(card_net) is None
    assert "Not estimated yet for layer2" in stats_source.stats_status(card_net, "layer2")
    stats = stats_source.choose_stats(card_net, "layer2")  # IBA_STATS_SAMPLES, as the app asks
    assert stats.n == 12 and "images" in stats.source
    assert stats_source.stats_status(card_net, "layer2").startswith("Ready, from the model card's image folder")
    got = stats_source.stats_for_methods(card_net, ["saliency", "iba_10"])
    assert got is not None and got.n == 12
    # the Per-Sample methods read the same statistics from the card's folder themselves
    x = torch.zeros(1, 3, card_net.spec.crop, card_net.spec.crop)
    amap = get_method("iba_10", steps=1, batch=2).attribute(card_net, x, 0)
    assert amap.extra["stats_samples"] == 12


def test_a_card_without_a_folder_gets_the_out_of_domain_warning(tmp_path, folder, offline_model) -> None:
    from iba_core.app import stats_source
    from iba_core.networks import load_network

    card = write_test_card(tmp_path, name="plain", weights=str(folder / "fruit.pth"),
                           classes=str(folder / "classes.txt"))
    plain = load_network(str(card), trust=Trust.local(code=True))  # its files lie in another folder
    assert "Out-of-domain statistics distort the bits" in stats_source.domain_warning(plain)
    assert stats_source.domain_warning(plain, folder / "images") is None
    assert stats_source.domain_warning(offline_model) is None  # the built-ins: natural photos are in their domain


def test_map_keys_name_statistics_by_their_source(card_net) -> None:
    from iba_core.app.maps import map_key
    from iba_core.feature_stats import FeatureStats

    a = FeatureStats(torch.zeros(1), torch.ones(1), 12, "card:fruit", "w", "layer2", "folder /a")
    b = FeatureStats(torch.zeros(1), torch.ones(1), 12, "card:fruit", "w", "layer2", "folder /b")
    key_a = map_key("img", card_net, 1, "iba_10", {"stats": a})
    assert key_a == map_key("img", card_net, 1, "iba_10", {"stats": a})
    assert key_a != map_key("img", card_net, 1, "iba_10", {"stats": b})
    assert "tensor" not in repr(key_a)


def test_readout_hint_and_checkpoints_by_card_path(card_net, folder, tmp_path) -> None:
    from iba_core.app.checkpoints import readout_checkpoints, readout_training_command

    command = readout_training_command(card_net, str(folder / "fruit.toml"))
    assert command.startswith(f"python -m iba_core train-readout --model {folder / 'fruit.toml'} --images ")
    assert "--out readout_runs/fruit" in command
    assert readout_checkpoints("card:fruit", dirs=[tmp_path], aliases=[str(folder / "fruit.toml")]) == []


def test_sanity_check_randomises_a_card_network_module_by_module(card_net) -> None:
    from iba_core.app.evaluation import sanity_levels, sanity_strip

    levels = sanity_levels(card_net)
    assert levels[:3] == ["fc", "layer4.1.bn2", "layer4.1.conv2"] and levels[-1] == "conv1"
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    before = {k: v.clone() for k, v in card_net.model.state_dict().items()}
    strip = sanity_strip(card_net, x, 2, "saliency", 2)
    assert strip.levels == ["fc", "layer4.1.bn2"] and len(strip.heatmaps) == 2
    assert all(torch.equal(before[k], v) for k, v in card_net.model.state_dict().items())  # a copy is randomised


def test_add_network_reads_server_paths_only_inside_allowed_folders(tmp_path, folder, state_bytes,
                                                                   monkeypatch) -> None:
    monkeypatch.delenv(settings.DATA_DIRS_ENV, raising=False)
    monkeypatch.setenv(settings.MODELS_DIR_ENV, str(tmp_path / "models"))

    def never(*args, **kwargs):
        raise AssertionError("a refused path was read")

    monkeypatch.setattr(models.shutil, "copyfile", never)
    monkeypatch.setattr("iba_core.images.find_images", never)
    for fields in ({"weights": FileGiven.local(folder / "fruit.pth")}, {"stats_images": str(folder / "images")}):
        with pytest.raises(NotTrustedError, match="outside the folders this app may read") as err:
            add_network(new_network(state_bytes, **fields), tmp_path / "models")
        assert settings.DATA_DIRS_ENV in err.value.app_hint and settings.TRUST_CODE_ENV not in err.value.app_hint
        # A file can be uploaded instead; an image folder cannot, so its hint names only the setting.
        assert ("upload" in err.value.app_hint.lower()) == ("weights" in fields)
    monkeypatch.undo()
    # An app listening on this machine only: its visitor is its owner, any path is read.
    card = add_network(new_network(state_bytes, weights=FileGiven.local(folder / "fruit.pth")), tmp_path / "models",
                       trust=Trust.for_app(localhost=True))
    assert card.is_file()


def test_on_loopback_the_owners_statistics_folder_is_read_elsewhere_one_setting_allows_it(
        tmp_path, folder, state_bytes, monkeypatch) -> None:
    """Issue #28.7: the expert's own image folder, outside the models folder, as the statistics folder."""
    from iba_core.app.stats_source import stats_folder, stats_status
    from iba_core.networks import load_network

    monkeypatch.delenv(settings.DATA_DIRS_ENV, raising=False)
    monkeypatch.delenv(settings.TRUST_CODE_ENV, raising=False)
    monkeypatch.setenv(settings.MODELS_DIR_ENV, str(tmp_path / "models"))
    own = folder / "images"  # the owner's folder: neither the models folder nor an IBA_DATA_DIRS one
    loopback = Trust.for_app(localhost=True)
    card = add_network(new_network(state_bytes, stats_images=str(own)), tmp_path / "models", trust=loopback)
    assert read_card(card, loopback).stats_images == own.resolve()
    network = load_network(str(card), trust=loopback)
    assert stats_folder(network) == str(own.resolve())  # the statistics come from it, not the sample photos
    assert "in the model card's folder" in stats_status(network, network.spec.default_layer)
    # The command line (the local user) reads the card the app wrote, without --trust-code.
    assert read_card(card, Trust.local()).stats_images == own.resolve()

    # An app that serves other machines: refused, and nothing falls back to other statistics; the sentence names
    # the one setting that allows the folder.
    served = Trust.for_app()
    with pytest.raises(NotTrustedError, match="leads outside the model card's folder") as err:
        read_card(card, served)
    assert err.value.app_hint.count("IBA_") == 1 and settings.DATA_DIRS_ENV in err.value.app_hint
    with pytest.raises(NotTrustedError, match="outside the folders this app may read") as err:
        add_network(new_network(state_bytes, name="other", stats_images=str(own)), tmp_path / "models",
                    trust=served)
    assert err.value.app_hint.count("IBA_") == 1 and settings.DATA_DIRS_ENV in err.value.app_hint
    assert not (tmp_path / "models" / "other").exists()
    # Named by the owner, the folder is read there too.
    monkeypatch.setenv(settings.DATA_DIRS_ENV, str(folder))
    assert read_card(card, Trust.for_app()).stats_images == own.resolve()
    # The card's other paths still stay in its folder on loopback (a class list is shown on the pages).
    monkeypatch.delenv(settings.DATA_DIRS_ENV)
    (tmp_path / "cards").mkdir()
    outside = write_test_card(tmp_path / "cards", name="leaky", weights=None,
                              classes=str(folder / "classes.txt"))
    with pytest.raises(NotTrustedError, match="leads outside the model card's folder"):
        read_card(outside, loopback)


# ---- every source in the form: torchvision, timm, Hugging Face, a built-in backbone, a model folder -----------

PETS = ["cat", "dog", "parrot"]


def saved(state: dict, suffix: str = ".pth") -> bytes:
    """A state dict's file bytes, as a user would upload them (torch.save, or safetensors' save)."""
    if suffix == ".safetensors":
        from safetensors.torch import save

        return save(state)
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def folder_upload(folder: Path) -> list[FileGiven]:
    """A saved model folder's files, uploaded together."""
    return [FileGiven.upload(p.name, p.read_bytes()) for p in sorted(folder.iterdir())
            if p.name in models.FOLDER_FILES]


def _gray(size: int) -> torch.Tensor:
    return torch.linspace(-1, 1, 3 * size * size).reshape(1, 3, size, size)


@pytest.fixture(scope="module")
def timm_pets():
    """timm's resnet18 with a 3-class head and random weights (seeded): (model, its state_dict file's bytes)."""
    import timm

    torch.manual_seed(3)
    model = timm.create_model("resnet18", num_classes=len(PETS)).eval()
    return model, saved(model.state_dict())


@pytest.fixture(scope="module")
def vit_folder(tmp_path_factory) -> Path:
    from source_fixtures import save_hf_vit

    return save_hf_vit(tmp_path_factory.mktemp("hf-form") / "fruit-vit")


def test_a_timm_network_from_a_state_dict_and_its_class_list(tmp_path, timm_pets) -> None:
    from iba_core.networks import load_network
    from iba_core.networks.timm_models import preprocessing_of

    model, data = timm_pets
    new = NewNetwork(name="pets", source="timm", arch="timm:resnet18", weights=FileGiven.upload("pets.pth", data),
                     classes=FileGiven.upload("pets.txt", "\n".join(PETS).encode()),
                     preprocess={"resize": 80, "crop": 64})  # a small crop keeps the dry passes quick
    root = tmp_path / "models"
    preview = models.preview_network(new, root)
    prep = preprocessing_of(model)  # timm's configuration: the rest of the preprocessing
    assert preview.class_count == 3 and preview.first_classes == tuple(PETS)
    assert preview.classes_from == "your class list" and preview.source == "timm model: resnet18"
    assert (preview.resize, preview.crop, preview.interpolation) == (80, 64, prep["interpolation"])
    assert preview.mean == pytest.approx(prep["mean"]) and preview.std == pytest.approx(prep["std"])
    assert preview.channels == 3 and preview.head == "softmax" and preview.layer_count > 5
    assert dict(preview.rows())["Classes"] == "3: cat, dog, parrot (from your class list)"
    assert list(root.iterdir()) == []  # the check adds nothing

    card = add_network(new, root)
    assert read_card(card).arch == "timm:resnet18"
    net = load_network(str(card), trust=Trust.for_app())
    assert net.categories == PETS and net.spec.default_layer == preview.default_layer
    x = _gray(net.spec.crop)
    torch.testing.assert_close(net.model(x), model(x), rtol=1e-4, atol=1e-5)  # the uploaded weights, not random


def test_a_state_dict_whose_head_differs_needs_a_class_list(tmp_path, timm_pets) -> None:
    from iba_core.errors import user_message

    new = NewNetwork(name="pets", source="timm", arch="resnet18",
                     weights=FileGiven.upload("pets.pth", timm_pets[1]), classes=None)
    with pytest.raises(WeightsMismatchError, match="output layer has 3 outputs but the network has 1000") as err:
        models.preview_network(new, tmp_path / "models")
    assert "Give the class list: 3 names" in user_message(err.value, "app")
    assert list((tmp_path / "models").iterdir()) == []


def test_a_hugging_face_folder_given_as_uploaded_files(tmp_path, vit_folder) -> None:
    """The form's folder source: config.json, model.safetensors and preprocessor_config.json uploaded together are
    copied into <name>/model/, and the card names that folder; classes and preprocessing come from its config."""
    from iba_core.networks import load_network

    new = NewNetwork(name="fruit-vit", source="folder", arch="", weights=None, classes=None,
                     folder_files=folder_upload(vit_folder))
    root = tmp_path / "models"
    preview = models.preview_network(new, root)
    assert preview.class_count == 5 and preview.first_classes == ("apple", "banana", "cherry", "date", "elderberry")
    assert preview.classes_from == "the model's configuration"
    assert (preview.resize, preview.crop) == (64, 64) and preview.mean == (0.5, 0.5, 0.5)
    assert preview.default_layer == "vit.layers.0" and list(root.iterdir()) == []

    card = add_network(new, root)
    assert sorted(p.name for p in (card.parent / "model").iterdir()) == ["config.json", "model.safetensors",
                                                                         "preprocessor_config.json"]
    assert read_card(card).model_folder == (card.parent / "model").resolve() and read_card(card).arch is None
    net, original = load_network(str(card), trust=Trust.for_app()), load_network(vit_folder)
    assert net.key == "card:fruit-vit" and net.categories == original.categories
    x = _gray(64)
    torch.testing.assert_close(net.model(x), original.model(x), rtol=1e-4, atol=1e-5)


def test_a_hugging_face_id_with_a_state_dict(tmp_path, vit_folder, monkeypatch) -> None:
    """hf:ORG/NAME: the architecture and preprocessing from the hub (here its cache, faked by the saved folder),
    the weights and classes from the form."""
    from transformers import ViTForImageClassification

    from iba_core.networks import hub
    from source_fixtures import tiny_vit_config

    monkeypatch.setattr(hub, "hub_file", lambda repo, filename, **_: (vit_folder / filename)
                        if (vit_folder / filename).is_file() else None)
    monkeypatch.setattr(hub, "hub_offline", lambda: True)
    torch.manual_seed(5)
    vit = ViTForImageClassification(tiny_vit_config(PETS)).eval()
    new = NewNetwork(name="pets-vit", source="hf", arch="someone/fruit-vit", classes=FileGiven.upload(
        "pets.txt", "\n".join(PETS).encode()), weights=FileGiven.upload("m.safetensors", saved(vit.state_dict(),
                                                                                               ".safetensors")))
    preview = models.preview_network(new, tmp_path / "models")
    assert preview.first_classes == tuple(PETS) and preview.crop == 64 and preview.source.endswith("someone/fruit-vit")
    assert read_card(add_network(new, tmp_path / "models")).arch == "hf:someone/fruit-vit"


def test_a_builtin_backbone_with_a_5_class_head(tmp_path) -> None:
    from iba_core.networks import REGISTRY, load_network
    from source_fixtures import FRUIT

    torch.manual_seed(2)
    data = saved(REGISTRY["efficientnet_lite0"].with_classes(5).state_dict(), ".safetensors")
    new = NewNetwork(name="fruit-lite", source="builtin", arch="efficientnet_lite0", classes=FileGiven.upload(
        "fruit.txt", "\n".join(FRUIT).encode()), weights=FileGiven.upload("fruit.safetensors", data))
    base = REGISTRY["efficientnet_lite0"]
    preview = models.preview_network(new, tmp_path / "models")
    assert preview.layer_count == len(base.layers) and preview.default_layer == base.default_layer
    assert (preview.resize, preview.crop) == (base.resize, base.crop) and preview.first_classes == tuple(FRUIT)
    net = load_network(str(add_network(new, tmp_path / "models")), trust=Trust.for_app())
    assert net.spec.layers == base.layers and net.categories == FRUIT and net.model._fc.out_features == 5


def test_a_model_folder_by_its_path_inside_the_allowed_folders_only(tmp_path, monkeypatch) -> None:
    from iba_core.networks import load_network
    from source_fixtures import FRUIT, save_timm_folder

    data = tmp_path / "data"
    folder = save_timm_folder(data / "fruit-resnet", name="resnet18")
    (folder / "notes.txt").write_text("not copied")
    monkeypatch.setenv(settings.MODELS_DIR_ENV, str(tmp_path / "models"))
    monkeypatch.setenv(settings.DATA_DIRS_ENV, str(data))
    new = NewNetwork(name="fruit", source="folder", arch="", weights=None, classes=None, folder_path=str(folder),
                     layer="layer3")
    card = add_network(new, tmp_path / "models")
    assert sorted(p.name for p in (card.parent / "model").iterdir()) == ["config.json", "model.safetensors"]
    net = load_network(str(card), trust=Trust.for_app())
    assert net.categories == FRUIT and net.spec.default_layer == "layer3" and net.key == "card:fruit"

    monkeypatch.delenv(settings.DATA_DIRS_ENV)  # the folder is outside the owner's folders now: never read

    def never(*args, **kwargs):
        raise AssertionError("a refused path was read")

    monkeypatch.setattr(models.shutil, "copyfile", never)
    monkeypatch.setattr(models, "read_folder", never)
    new.name = "again"
    with pytest.raises(NotTrustedError, match="model folder .* is outside the folders this app may read"):
        add_network(new, tmp_path / "models")
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["fruit"]


@pytest.mark.parametrize("fields, message", [
    ({"source": "onnx"}, "Choose the network's source"),
    ({"source": "timm", "arch": ""}, "Give the timm model's name"),
    ({"source": "timm", "arch": "resnet_eighteen"}, "timm has no model 'resnet_eighteen'"),
    ({"source": "hf", "arch": "a b/c"}, "is not a Hugging Face model id; give ORG/NAME"),
    ({"source": "builtin", "arch": "resnet18"}, "Choose one of the built-in backbones"),
    ({"source": "folder"}, "A model folder brings its own weights"),
    ({"source": "folder", "weights": None}, "Give the model folder"),
    ({"source": "folder", "weights": None, "folder_files": ["model.safetensors"]}, "config.json is missing"),
    ({"source": "folder", "weights": None, "folder_files": ["config.json"]}, "weights are missing"),
    ({"source": "folder", "weights": None, "folder_files": ["config.json", "model.safetensors", "optimizer.pt"]},
     "optimizer.pt is no file of a model folder"),
    ({"source": "folder", "weights": None, "folder_files": ["config.json", "config.json"]}, "given twice"),
    ({"source": "folder", "weights": None, "folder_files": ["config.json"], "folder_path": "/x"},
     "files or its path on this machine, not both"),
])
def test_each_source_refuses_what_it_cannot_use(fields, message, tmp_path, state_bytes) -> None:
    from iba_core.errors import UserError

    fields = dict(fields)
    fields["folder_files"] = [FileGiven.upload(n, b"{}") for n in fields.get("folder_files", [])]
    new = new_network(state_bytes, **fields)
    with pytest.raises(UserError, match=message):
        models.preview_network(new, tmp_path / "models", trust=Trust.for_app(localhost=True))
    assert not (tmp_path / "models").exists() or list((tmp_path / "models").iterdir()) == []


def test_a_state_dict_of_another_source_says_which_source_fits(tmp_path) -> None:
    """A fine-tuned EfficientNet-Lite0 given as a torchvision ResNet-50: the refusal names the source it fits, in
    each front end's words, in the form and when the card is loaded on the command line."""
    from iba_core.errors import user_message
    from iba_core.networks import REGISTRY, load_network
    from source_fixtures import FRUIT

    torch.manual_seed(2)
    data = saved(REGISTRY["efficientnet_lite0"].with_classes(5).state_dict(), ".safetensors")
    new = NewNetwork(name="lite", source="torchvision", arch="resnet50", classes=FileGiven.upload(
        "fruit.txt", "\n".join(FRUIT).encode()), weights=FileGiven.upload("lite.safetensors", data))
    with pytest.raises(WeightsMismatchError) as err:
        add_network(new, tmp_path / "models")
    looks = "these weights look like the built-in EfficientNet-Lite0 backbone with a 5-class head"
    assert looks in str(err.value) and ".adding-" not in str(err.value)
    assert 'Choose that source ("Built-in backbone with your head", efficientnet_lite0)' in user_message(err.value,
                                                                                                      "app")
    assert list((tmp_path / "models").iterdir()) == []

    (tmp_path / "lite.safetensors").write_bytes(data)
    (tmp_path / "fruit.txt").write_text("\n".join(FRUIT))
    (tmp_path / "lite.toml").write_text('arch = "torchvision:resnet50"\nweights = "lite.safetensors"\n'
                                        'classes = "fruit.txt"\n')
    with pytest.raises(WeightsMismatchError, match=looks) as err:
        load_network(tmp_path / "lite.toml")
    assert 'Write arch = "efficientnet_lite0" in the model card' in user_message(err.value, "cli")


# ---- a CLIP model's folder (issue #30) -------------------------------------------------------------


def test_a_clip_folder_uploaded_with_its_tokenizer_becomes_a_prompt_network(tmp_path):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from clip_fixtures import save_tiny_clip
    from iba_core.networks import load_network
    from iba_core.errors import UserError
    from iba_core.networks.clip_models import is_clip

    source = save_tiny_clip(tmp_path / "src")
    files = [FileGiven.upload(p.name, p.read_bytes()) for p in sorted(source.iterdir())]
    assert {f.name for f in files} <= set(models.FOLDER_FILES)  # every file save_pretrained wrote is taken
    root = tmp_path / "models"
    new = NewNetwork(name="clip", arch="", source="folder", weights=None, classes=None, folder_files=files)
    rows = dict(models.preview_network(new, root, Trust.for_app()).rows())
    assert rows["Head"].startswith("similarity") and "text prompts" in rows["Classes"]
    network = load_network(str(add_network(new, root, Trust.for_app())))
    assert is_clip(network) and network.head == "similarity"
    assert "a CLIP model, explaining text prompts" in models.source_note(network.key, network)
    # without its tokenizer the folder cannot read a prompt: the library's sentence, nothing added
    no_tokenizer = [f for f in files if f.name not in models.TOKENIZER_FILES]
    with pytest.raises(UserError, match="no tokenizer"):
        add_network(NewNetwork(name="clip2", arch="", source="folder", weights=None, classes=None,
                               folder_files=no_tokenizer), root, Trust.for_app())
    assert not (root / "clip2").exists()


# ---- two class names: the mismatch's hint fits the weights' outputs (#38 item 7) ----------------------------------


def _state(outputs: int) -> bytes:
    buf = io.BytesIO()
    torch.save(make_resnet18(outputs).state_dict(), buf)
    return buf.getvalue()


def test_a_two_output_model_that_does_not_fit_gets_no_binary_hint(tmp_path) -> None:
    """A 2-output ResNet-18's weights given as a ResNet-34 with two class names: the weights do not fit, and the
    message names neither a binary head (the file has two outputs) nor a field the form lacks (a card's `head`)."""
    from iba_core.errors import user_message

    new = new_network(_state(2), name="pair", classes=["no", "yes"], arch="resnet34")
    with pytest.raises(WeightsMismatchError) as err:
        add_network(new, tmp_path / "models")
    assert err.value.file_outputs == 2 and not err.value.binary
    for front_end in ("app", "cli"):
        text = user_message(err.value, front_end)
        assert "do not fit" in text and "binary" not in text and "head =" not in text, text
    assert list((tmp_path / "models").iterdir()) == []


def test_one_output_for_two_class_names_is_added_as_a_binary_network(tmp_path) -> None:
    """The form has no head field: weights with one output and a class list of two names are added as a binary
    classifier (the card it writes says head = "binary"), where before the form answered with a hint to edit the
    card."""
    from iba_core.networks import load_network

    card = add_network(new_network(_state(1), name="single", classes=["benign", "malignant"]), tmp_path / "models")
    assert 'head = "binary"' in card.read_text()
    net = load_network(str(card), trust=Trust.for_app())
    assert net.head == "binary" and net.categories == ["benign", "malignant"]
    # three names for one output stay a mismatch, said as such (no binary head is guessed)
    with pytest.raises(WeightsMismatchError, match="class list has 3 names but the weights' output layer has 1"):
        add_network(new_network(_state(1), name="three", classes=["a", "b", "c"]), tmp_path / "models")
