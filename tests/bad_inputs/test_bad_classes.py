"""Bad class names (issue #20): a name several classes share needs its index (never silently the first one),
"-1" is an index out of range, not a name, and a class list longer than MAX_CLASSES is refused before a network is
sized by it; through the library, the CLI, the form and the Per-Sample page."""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from card_fixtures import make_resnet18, write_card  # noqa: E402

from bad_input_helpers import assert_one_sentence, cli_error, page_errors, run_cli  # noqa: E402
from iba_core.app.models import FileGiven, NewNetwork, add_network  # noqa: E402
from iba_core.errors import UserError  # noqa: E402
from iba_core.networks import ModelCardError, load_network  # noqa: E402
from iba_core.trust import Trust  # noqa: E402

NAMES = ["cat", "dog", "Cat"]


@pytest.fixture(scope="module")
def twice(tmp_path_factory) -> tuple[Path, Path]:
    """A card of a 3-class ResNet-18 (random weights) whose list names 'cat' twice, and a photo."""
    folder = tmp_path_factory.mktemp("twice")
    (folder / "classes.txt").write_text("\n".join(NAMES))
    image = folder / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(image)
    return write_card(folder, weights=None), image


def test_a_shared_name_needs_its_index(twice) -> None:
    card, image = twice
    network = load_network(card)
    assert network.categories == NAMES
    with pytest.raises(UserError, match=r"2 classes are named 'cat' \(indices 0, 2\)") as err:
        network.class_index("cat")
    assert_one_sentence(str(err.value))
    assert network.class_index("2") == 2 and network.class_index("dog") == 1
    message = cli_error(run_cli(["attribute", image, "--model", card, "--target", "cat"]))
    assert "indices 0, 2" in message and "give the index" in message
    assert_one_sentence(message)


def test_minus_one_is_an_index_out_of_range(twice) -> None:
    card, image = twice
    with pytest.raises(UserError, match=r"Class index -1 is out of range 0…2\."):
        load_network(card).class_index("-1")
    message = cli_error(run_cli(["attribute", image, "--model", card, "--target", "-1"]))
    assert "Class index -1 is out of range 0…2." in message
    assert_one_sentence(message)


# ---- a class list longer than any network's ------------------------------------------------------------


@pytest.fixture
def no_build(monkeypatch) -> list:
    """Records any attempt to build a torchvision network from a card (sized by the class list)."""
    import iba_core.networks.torchvision_any as torchvision_any

    built: list = []
    real = torchvision_any.build_model

    def spy(name, weights_check=None, **kwargs):
        built.append(kwargs.get("num_classes"))
        if kwargs.get("num_classes", 1000) > 1000:  # an unbounded list fails here, not by memory
            raise AssertionError(f"a network with {kwargs['num_classes']:,} outputs was about to be built")
        return real(name, weights_check, **kwargs)

    monkeypatch.setattr(torchvision_any, "build_model", spy)
    return built


@pytest.mark.parametrize("suffix", [".txt", ".json", ".csv"])
def test_a_class_list_over_the_limit_is_refused_before_the_network_is_built(suffix, tmp_path, no_build) -> None:
    from iba_core.networks.card_format import read_class_list

    limit = 100_000  # cards.MAX_CLASSES
    count = limit + 1
    names = [f"c{i}" for i in range(count)]
    path = tmp_path / f"classes{suffix}"
    if suffix == ".txt":
        path.write_text("\n".join(names))
    elif suffix == ".json":
        path.write_text(json.dumps(names))
    else:
        path.write_text("index,name\n" + "\n".join(f"{i},{n}" for i, n in enumerate(names)))
    with pytest.raises(ModelCardError, match="has 100,001 names, more than the 100,000") as err:
        read_class_list(path)
    assert_one_sentence(str(err.value))
    card = write_card(tmp_path, weights=None, classes=path.name)
    with pytest.raises(ModelCardError, match="more than the 100,000"):
        load_network(card, weights="random")
    message = cli_error(run_cli(["models", "--model", card, "--random-weights"]))
    assert "has 100,001 names, more than the 100,000" in message
    assert_one_sentence(message)
    assert no_build == []
    if suffix == ".txt":  # as many as allowed are read
        path.write_text("\n".join(names[:limit]))
        assert len(read_class_list(path)) == limit


def test_the_form_refuses_a_class_list_over_the_limit(tmp_path, no_build) -> None:
    buf = io.BytesIO()
    torch.save(make_resnet18().state_dict(), buf)
    lines = "\n".join(f"class {i}" for i in range(100_001)).encode()
    new = NewNetwork(name="many", arch="resnet18", weights=FileGiven.upload("m.pth", buf.getvalue()),
                     classes=FileGiven.upload("labels.txt", lines))
    with pytest.raises(ModelCardError, match="labels.txt has 100,001 names") as err:
        add_network(new, tmp_path / "models", trust=Trust.for_app())
    assert ".adding-" not in str(err.value)
    assert_one_sentence(str(err.value))
    assert no_build == [] and list((tmp_path / "models").iterdir()) == []


# ---- the Per-Sample page -------------------------------------------------------------------------------


def test_the_per_sample_page_refuses_bad_targets_and_keeps_the_result(open_page) -> None:
    at = open_page("per_sample")
    assert at.session_state["network"] == "efficientnet_lite0"
    at.number_input(key="ps_steps").set_value(1)
    at.number_input(key="ps_batch").set_value(2)
    at = at.button(key="ps_run_button").click().run()  # a good target first: the top-1 class
    assert page_errors(at) == []
    record = at.session_state["ps_run"]
    for target, text in (("-1", "Class index -1 is out of range 0…999."),
                         # its list names the corgi (264) and the sweater (474) "Cardigan"/"cardigan"
                         ("cardigan", "2 classes are named 'cardigan' (indices 264, 474)")):
        at.text_input(key="ps_other").input(target)
        at = at.button(key="ps_run_button").click().run()
        errors = page_errors(at)
        assert len(errors) == 1 and text in errors[0], errors
        assert_one_sentence(errors[0])
        assert at.session_state["ps_run"] is record  # the previous result is kept
