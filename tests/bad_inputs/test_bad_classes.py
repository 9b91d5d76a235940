"""Bad class names (issue #20): a name several classes share needs its index (never silently the first one), and
"-1" is an index out of range, not a name; through the library and the CLI."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "networks"))
from card_fixtures import write_card  # noqa: E402

from bad_input_helpers import assert_one_sentence, cli_error, run_cli  # noqa: E402
from iba_core.networks import load_network  # noqa: E402

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
    with pytest.raises(ValueError, match=r"2 classes are named 'cat' \(indices 0, 2\)") as err:
        network.class_index("cat")
    assert_one_sentence(str(err.value))
    assert network.class_index("2") == 2 and network.class_index("dog") == 1
    message = cli_error(run_cli(["attribute", image, "--model", card, "--target", "cat"]))
    assert "indices 0, 2" in message and "give the index" in message
    assert_one_sentence(message)


def test_minus_one_is_an_index_out_of_range(twice) -> None:
    card, image = twice
    with pytest.raises(ValueError, match=r"Class index -1 is out of range 0…2\."):
        load_network(card).class_index("-1")
    message = cli_error(run_cli(["attribute", image, "--model", card, "--target", "-1"]))
    assert "Class index -1 is out of range 0…2." in message
    assert_one_sentence(message)
