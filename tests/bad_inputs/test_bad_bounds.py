"""Bounds (issue 27.7): a class list is refused by its size before a byte of it is read, and an image smaller than
MIN_SIDE on a side is refused (never silently upscaled and explained); through the library, the CLI and the app."""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from bad_input_helpers import assert_one_sentence, cli_error, page_errors, run_cli
from iba_core.app.models import FileGiven, NewNetwork, add_network
from iba_core.images import MIN_SIDE, ImageError
from iba_core.band_images import load_input, photo_or_path
from iba_core.networks import ModelCardError, read_class_list
from iba_core.networks.card_format import MAX_CLASS_LIST_BYTES
from iba_core.trust import Trust


def png(size: tuple[int, int]) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


@pytest.mark.parametrize("size", [(1, 1), (15, 300), (300, 15)])
def test_an_image_below_the_smallest_side_is_refused(size, tmp_path) -> None:
    path = tmp_path / "tiny.png"
    path.write_bytes(png(size))
    for source in (path, path.read_bytes()):
        with pytest.raises(ImageError, match=f"at least {MIN_SIDE} pixels on each side") as err:
            load_input(source)
        assert f"{size[0]} × {size[1]} pixels" in str(err.value)
        assert_one_sentence(str(err.value))
    with pytest.raises(ImageError, match="upscaled"):
        photo_or_path(path)
    with pytest.raises(ImageError, match="at least 16 pixels"):  # an array image too
        load_input(np.zeros((size[1], size[0], 4), np.float32), 4)


def test_an_image_of_the_smallest_side_is_read(tmp_path) -> None:
    assert load_input(png((MIN_SIDE, MIN_SIDE))).size == (MIN_SIDE, MIN_SIDE)
    assert load_input(np.zeros((MIN_SIDE, 40, 1), np.uint8), 1).size == (40, MIN_SIDE)


def test_the_cli_refuses_a_1x1_image_before_the_network_loads(tmp_path, monkeypatch) -> None:
    from iba_core.cli import common

    def never(*args, **kwargs):
        raise AssertionError("the network was loaded for a 1 × 1 image")

    monkeypatch.setattr(common, "load_from_args", never)
    (tmp_path / "dot.png").write_bytes(png((1, 1)))
    result = run_cli(["attribute", tmp_path / "dot.png"])
    message = cli_error(result)
    assert "1 × 1 pixels" in message and f"at least {MIN_SIDE} pixels" in message
    assert_one_sentence(message)


def test_the_app_refuses_a_1x1_upload(open_page) -> None:
    at = open_page("per_sample")
    at.radio(key="image_source").set_value("Upload").run()
    at.file_uploader[0].set_value(("dot.png", png((1, 1)), "image/png")).run()
    errors = page_errors(at)
    assert len(errors) == 1 and f"at least {MIN_SIDE} pixels on each side" in errors[0], errors
    assert_one_sentence(errors[0])
    assert not at.get("form"), "no Run form without a usable image"


def big_class_list(path: Path) -> Path:
    """A class list one byte over the cap: a sparse file, so the test writes next to nothing."""
    with open(path, "wb") as f:
        f.truncate(MAX_CLASS_LIST_BYTES + 1)
    return path


def test_a_class_list_over_the_cap_is_refused_before_it_is_read(tmp_path, monkeypatch) -> None:
    path = big_class_list(tmp_path / "classes.txt")

    def never(*args, **kwargs):
        raise AssertionError("the class list was read")

    monkeypatch.setattr(Path, "read_text", never)
    with pytest.raises(ModelCardError, match=f"larger than the {MAX_CLASS_LIST_BYTES // 2**20} MB") as err:
        read_class_list(path)
    assert_one_sentence(str(err.value))


def test_a_card_with_a_huge_class_list_is_refused_in_the_cli(tmp_path) -> None:
    big_class_list(tmp_path / "classes.txt")
    (tmp_path / "net.toml").write_text('arch = "efficientnet_lite0"\nclasses = "classes.txt"\n')
    message = cli_error(run_cli(["stats", "--model", tmp_path / "net.toml", "--n", "1"]))
    assert "MB, larger than the 16 MB" in message
    assert_one_sentence(message)


def test_the_form_refuses_a_huge_class_list_before_copying_it(tmp_path) -> None:
    path = big_class_list(tmp_path / "classes.txt")
    upload = FileGiven.upload("classes.txt", b"x" * (MAX_CLASS_LIST_BYTES + 1))
    for classes in (upload, FileGiven.local(path)):
        new = NewNetwork(name="big", source="builtin", arch="efficientnet_lite0",
                         weights=FileGiven.upload("w.pth", b"not read"), classes=classes)
        with pytest.raises(ModelCardError, match="larger than the 16 MB") as err:
            add_network(new, tmp_path / "models", Trust.local())
        assert_one_sentence(str(err.value))
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


def test_the_app_refuses_a_huge_class_list_upload(open_page) -> None:
    at = open_page("per_sample")
    at.radio(key="add_source").set_value("builtin")
    at = at.run()
    at.text_input(key="add_name").input("big")
    at.file_uploader(key="add_weights").set_value(("w.pth", b"not read", "application/octet-stream"))
    at.file_uploader(key="add_classes").set_value(("classes.txt", b"x" * (MAX_CLASS_LIST_BYTES + 1), "text/plain"))
    at = at.button(key="add_check_button").click().run()
    errors = page_errors(at)
    assert len(errors) == 1 and "larger than the 16 MB" in errors[0], errors
    assert_one_sentence(errors[0])
