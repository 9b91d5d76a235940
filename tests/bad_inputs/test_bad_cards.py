"""Bad model cards (issue #20): a card is data. Code it names runs only when the person running the program
allows it; its paths stay in its folder; its preprocessing stays in sensible ranges; paths typed into the app
are read only inside the owner's folders. Each refusal goes through the library, the CLI and the app."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from card_fixtures import CLASSES, make_card_folder, make_resnet18, write_card  # noqa: E402

from bad_input_helpers import assert_one_sentence, cli_error, new_app, page_errors, run_cli  # noqa: E402
from iba_core import settings  # noqa: E402
from iba_core.errors import user_message  # noqa: E402
from iba_core.networks import ModelCardError, load_network, read_card  # noqa: E402
from iba_core.trust import NotTrustedError, Trust  # noqa: E402


def system_card(folder: Path, marker: Path) -> Path:
    """A card whose builder is os.system, told to create `marker`."""
    folder.mkdir(parents=True, exist_ok=True)
    card = folder / "evil.toml"
    card.write_text(f'arch = "os:system"\n\n[arch_args]\ncommand = "touch {marker}"\n')
    return card


def module_card(folder: Path, marker: Path) -> Path:
    """A card whose builder lives in a module beside it that creates `marker` when imported."""
    module = f"beside_{abs(hash(str(folder))) % 10**8}"  # a fresh module name: never imported before
    (folder / f"{module}.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\n\n"
        "import torch\n\ndef build():\n    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), "
        "torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 7))\n")
    (folder / "classes.txt").write_text("\n".join(CLASSES))
    return write_card(folder, name="beside", arch=f"{module}:build", weights=None)


# ---- code in a card ------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [system_card, module_card])
def test_code_in_a_card_runs_only_when_allowed(make, tmp_path) -> None:
    marker = tmp_path / "ran"
    card = make(tmp_path / "card", marker) if make is system_card else make(tmp_path, marker)
    for trust in (Trust(), Trust.local(), Trust.for_app()):
        with pytest.raises(NotTrustedError) as err:
            load_network(card, weights="random", trust=trust)
        assert not marker.exists()
        assert "Python code" in str(err.value)
        assert "--trust-code" in user_message(err.value, "cli")
        assert "IBA_TRUST_CODE=1" in user_message(err.value, "app")
        assert_one_sentence(str(err.value))
    # Allowed: it runs (os.system returns an int, which is then refused as not a network).
    try:
        load_network(card, weights="random", trust=Trust.local(code=True))
    except ModelCardError as err:
        assert "not a torch nn.Module" in str(err)
    assert marker.exists()


def test_cli_runs_card_code_only_with_trust_code(tmp_path) -> None:
    marker = tmp_path / "ran"
    card = system_card(tmp_path / "card", marker)
    message = cli_error(run_cli(["models", "--model", card]))
    assert not marker.exists()
    assert "--trust-code" in message and "os:system" in message
    assert_one_sentence(message)
    cli_error(run_cli(["models", "--model", card, "--trust-code"]))  # runs, then is no network
    assert marker.exists()


def test_train_readout_passes_trust_code_on(tmp_path) -> None:
    """train-readout loads its network itself: the card's code runs only with --trust-code there too."""
    marker = tmp_path / "ran"
    card = system_card(tmp_path / "card", marker)
    argv = ["train-readout", "--model", card, "--sample-photos", "2", "--epochs", "1", "--out", str(tmp_path / "r")]
    message = cli_error(run_cli(argv))
    assert not marker.exists() and "--trust-code" in message
    assert_one_sentence(message)
    cli_error(run_cli([*argv, "--trust-code"]))  # the builder runs (and builds no network)
    assert marker.exists()


def test_the_app_never_runs_card_code_unless_its_owner_allows_it(tmp_path, monkeypatch) -> None:
    models = tmp_path / "models"
    marker = tmp_path / "ran"
    card = system_card(models / "evil", marker)
    monkeypatch.setenv(settings.MODELS_DIR_ENV, str(models))
    monkeypatch.delenv(settings.TRUST_CODE_ENV, raising=False)
    at = new_app()
    at.switch_page("pages/per_sample.py").run()
    at = at.selectbox(key="network").set_value(str(card.resolve())).run()
    errors = page_errors(at)
    assert not marker.exists()
    assert len(errors) == 1 and "IBA_TRUST_CODE=1" in errors[0] and "--trust-code" not in errors[0]
    assert_one_sentence(errors[0])


def test_the_form_never_writes_a_code_card(tmp_path) -> None:
    from iba_core.app.models import FileGiven, NewNetwork, add_network

    marker = tmp_path / "ran"
    new = NewNetwork(name="evil", arch="os:system", weights=FileGiven.upload("m.pth", b"x"),
                     classes=FileGiven.upload("classes.txt", f"touch {marker}".encode()))
    with pytest.raises(ModelCardError, match="torchvision has no classification network 'os:system'"):
        add_network(new, tmp_path / "models", trust=Trust.for_app())
    assert not marker.exists() and not (tmp_path / "models" / "evil").exists()


# ---- paths in a card -----------------------------------------------------------------------------------


@pytest.fixture
def outside(tmp_path) -> dict[str, Path]:
    """A card folder and, beside it, a secret file; cards naming it by ../, by absolute path, by a symlink."""
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0\nalice\nbob\ncarol\ndave\neve\nfrank\n")
    folder = tmp_path / "card"
    folder.mkdir()
    (folder / "link.txt").symlink_to(secret)
    cards = {"dotdot": "../secret.txt", "absolute": str(secret), "symlink": "link.txt"}
    return {how: write_card(folder, name=how, weights=None, classes=value) for how, value in cards.items()}


@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_card_paths_stay_in_the_card_folder_unless_allowed(how, outside, monkeypatch) -> None:
    card = outside[how]
    monkeypatch.delenv(settings.TRUST_CODE_ENV, raising=False)
    monkeypatch.delenv(settings.DATA_DIRS_ENV, raising=False)
    for trust in (Trust(), Trust.for_app(), Trust.for_app(localhost=True), Trust.local()):
        with pytest.raises(NotTrustedError, match="leads outside the model card's folder") as err:
            read_card(card, trust)
        assert "root:x" not in str(err.value)
        assert settings.DATA_DIRS_ENV in user_message(err.value, "app")
        assert "--trust-code" in user_message(err.value, "cli")
        assert_one_sentence(user_message(err.value, "app"))
    # The command line and Python (the local user) follow them only with --trust-code, like code.
    message = cli_error(run_cli(["models", "--model", card, "--random-weights"]))
    assert "leads outside the model card's folder" in message and "--trust-code" in message
    assert settings.TRUST_CODE_ENV not in message and "root:x" not in message
    assert_one_sentence(message)
    assert run_cli(["models", "--model", card, "--random-weights", "--trust-code", "--json"]).code == 0
    assert read_card(card, Trust.local(code=True)).classes is not None
    # The owner's setting allows them in the app.
    monkeypatch.setenv(settings.TRUST_CODE_ENV, "1")
    assert read_card(card, Trust.for_app()).classes == (card.parent.parent / "secret.txt").resolve()


def test_a_card_inside_its_folder_or_a_data_folder_is_fine(tmp_path, monkeypatch) -> None:
    folder = make_card_folder(tmp_path / "models" / "fruit")
    monkeypatch.delenv(settings.TRUST_CODE_ENV, raising=False)
    monkeypatch.setenv(settings.MODELS_DIR_ENV, str(tmp_path / "models"))
    assert read_card(folder / "fruit.toml", Trust.for_app()).stats_images == (folder / "images").resolve()
    images = tmp_path / "data" / "images"
    images.mkdir(parents=True)
    card = write_card(folder, name="data", extra=f'stats_images = "{images}"\n')
    with pytest.raises(NotTrustedError):
        read_card(card, Trust.for_app())
    monkeypatch.setenv(settings.DATA_DIRS_ENV, str(tmp_path / "data"))
    assert read_card(card, Trust.for_app()).stats_images == images.resolve()


# ---- preprocessing numbers -----------------------------------------------------------------------------


@pytest.mark.parametrize("entry, text", [
    ("crop = 100000", "preprocess.crop must be a whole number of pixels from 16 to 1024, not 100000"),
    ("crop = 0", "from 16 to 1024"),
    ("resize = 99999999", "preprocess.resize must be a whole number of pixels from 16 to 2048"),
    ("mean = [0.5, 0.5]", "preprocess.mean must be 3 numbers, one per input channel of the network, not 2"),
    ("std = [0.2, 0.0, 0.2]", "preprocess.std must be one number per input channel from 0.001 to 10"),
    ("mean = [120.0, 115.0, 100.0]", "from 0 to 1"),
])
def test_preprocessing_numbers_are_checked_before_anything_is_allocated(entry, text, tmp_path) -> None:
    card = write_card(tmp_path, weights=None, classes=None, extra=f"[preprocess]\n{entry}\n")
    with pytest.raises(ModelCardError) as err:
        load_network(card, weights="random")
    assert text in str(err.value)
    assert_one_sentence(str(err.value))
    message = cli_error(run_cli(["models", "--model", card, "--random-weights"]))
    assert text in message


# ---- paths typed into the app --------------------------------------------------------------------------


def test_the_form_reads_no_server_path_outside_the_owners_folders(tmp_path, monkeypatch) -> None:
    models = tmp_path / "models"
    models.mkdir()
    weights = tmp_path / "elsewhere" / "model.pth"
    weights.parent.mkdir()
    torch.save(make_resnet18().state_dict(), weights)
    monkeypatch.setenv(settings.MODELS_DIR_ENV, str(models))
    monkeypatch.delenv(settings.DATA_DIRS_ENV, raising=False)
    at = new_app()
    at.switch_page("pages/per_sample.py").run()
    before = at.session_state["network"]
    for path_key, value in (("add_weights_path", str(weights)), ("add_images", "/usr")):
        at.text_input(key="add_name").input("visitor")
        at.text_input(key="add_weights_path").input(str(weights) if path_key == "add_weights_path" else "")
        at.text_input(key="add_images").input(value if path_key == "add_images" else "")
        if path_key == "add_images":
            at.file_uploader(key="add_weights").set_value(("m.pth", weights.read_bytes(), "application/octet-stream"))
        at.file_uploader(key="add_classes").set_value(("classes.txt", "\n".join(CLASSES).encode(), "text/plain"))
        at = at.button(key="add_network_button").click().run()
        errors = page_errors(at)
        assert len(errors) == 1 and "outside the folders this app may read" in errors[0], errors
        assert settings.DATA_DIRS_ENV in errors[0]
        assert_one_sentence(errors[0])
        assert at.session_state["network"] == before and list(models.iterdir()) == []


# ---- numbers a builder allocates from --------------------------------------------------------------------


@pytest.fixture
def no_build(monkeypatch) -> list:
    """Records any attempt to build a torchvision network from a card (it must not happen for a refused card)."""
    import iba_core.networks.torchvision_any as torchvision_any

    built: list = []
    real = torchvision_any.build_model

    def spy(name, weights_check=None, **kwargs):
        built.append(kwargs)
        if len(kwargs) > 3 or kwargs.get("num_classes", 1000) > 1000:  # refused cards fail here, not by memory
            raise AssertionError(f"a refused card reached the builder with {str(kwargs)[:200]}")
        return real(name, weights_check, **kwargs)

    monkeypatch.setattr(torchvision_any, "build_model", spy)
    return built


@pytest.mark.parametrize("entries, text", [
    ("num_classes = 5000000", "arch_args.num_classes must be a whole number from 1 to 100,000, not 5000000"),
    ("num_classes = 0", "arch_args.num_classes must be a whole number from 1 to 100,000"),
    ("num_classes = 7.5", "arch_args.num_classes must be a whole number"),
    ("image_size = 1000000000", "arch_args.image_size must be a number from -100,000 to 100,000, not 1000000000"),
    ("dropout = nan", "arch_args.dropout must be a number from -100,000 to 100,000, not nan"),
    ("width = -inf", "not -inf"),
    ("widths = [64, 128, 1e12]", "arch_args.widths.2 must be a number"),
    ("layers = [" + ", ".join(["1"] * 17) + "]", "arch_args.layers must hold at most 16 entries, not 17"),
    ("deep = [[[[1]]]]", "arch_args.deep.0.0.0 nests lists or tables more than 3 deep"),
    ("[arch_args.block]\n" + "\n".join(f"k{i} = {i}" for i in range(17)), "arch_args.block must hold at most 16 entries, not 17"),
], ids=["num_classes huge", "num_classes 0", "num_classes float", "image_size", "nan", "inf", "in a list",
        "long list", "deep", "long table"])
def test_arch_args_are_bounded_before_the_builder_runs(entries, text, tmp_path, no_build) -> None:
    header = "[arch_args]\n" if not entries.startswith("[") else ""
    card = write_card(tmp_path, weights=None, classes=None, extra=f"{header}{entries}\n")
    with pytest.raises(ModelCardError) as err:
        load_network(card, weights="random")
    assert text in str(err.value), str(err.value)
    assert_one_sentence(str(err.value))
    assert no_build == []  # refused before anything was built
    message = cli_error(run_cli(["models", "--model", card, "--random-weights"]))
    assert text in message
    assert_one_sentence(message)
    assert no_build == []


def test_too_many_arch_args_are_refused(tmp_path, no_build) -> None:
    entries = "\n".join(f"a{i} = {i}" for i in range(17))
    card = write_card(tmp_path, weights=None, classes=None, extra=f"[arch_args]\n{entries}\n")
    with pytest.raises(ModelCardError, match="has 17 \\[arch_args\\] entries, more than the 16") as err:
        load_network(card, weights="random")
    assert_one_sentence(str(err.value))
    assert no_build == []


def test_sensible_arch_args_still_build(tmp_path, no_build) -> None:
    (tmp_path / "classes.txt").write_text("\n".join(CLASSES))
    card = write_card(tmp_path, weights=None, extra="[arch_args]\nnum_classes = 7\nzero_init_residual = true\n"
                      "width_per_group = 64\n")
    network = load_network(card, weights="random")
    assert network.categories == CLASSES and no_build and no_build[0]["num_classes"] == 7
    assert run_cli(["models", "--model", card, "--random-weights", "--json"]).code == 0
