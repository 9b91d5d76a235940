"""Bad and unusual images through the library (load_image), the CLI (`attribute IMAGE`) and the app's upload.

Each case either works (an upright RGB image) or is refused with one sentence, before any pixel is decoded where
the header already tells, before the network loads on the command line, and without losing the page's result.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from PIL import Image, ImageFile

from bad_input_helpers import assert_one_sentence, cli_error, page_errors, run_cli
from iba_core.images import FRAMES_INFO, MAX_ASPECT_RATIO, MAX_SIDE, ImageError, load_image


def encode(img: Image.Image, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def truncated_png() -> bytes:
    rng = np.random.default_rng(0)
    data = encode(Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)), "PNG")
    return data[: len(data) // 2]


def animated_gif(frames: int) -> bytes:
    """A GIF with `frames` distinct 16×16 frames (identical ones would be merged by the encoder)."""
    rng = np.random.default_rng(1)
    images = [Image.fromarray((rng.integers(0, 4, (16, 16)) * 60).astype(np.uint8)).convert("P")
              for _ in range(frames)]
    return encode(images[0], "GIF", save_all=True, append_images=images[1:], duration=10)


def palette_with_transparency() -> bytes:
    """Left half transparent (index 0), right half red (index 1)."""
    img = Image.new("P", (40, 20), 1)
    img.putpalette([0, 0, 0, 255, 0, 0] + [0] * 762)
    img.paste(0, (0, 0, 20, 20))
    return encode(img, "PNG", transparency=0)


#: Refused files: name, bytes, words the sentence must hold.
REFUSED: dict[str, tuple[str, Callable[[], bytes], str]] = {
    "empty": ("empty.png", lambda: b"", "empty"),
    "truncated": ("cut.png", truncated_png, "truncated or corrupt"),
    "text": ("notes.jpg", lambda: b"just some text, not a photo\n" * 20, "not a readable image"),
    "strip_20000x1": ("strip.png", lambda: encode(Image.new("1", (20000, 1)), "PNG"), "times as wide"),
    "strip_100000x1": ("strip.png", lambda: encode(Image.new("1", (100000, 1)), "PNG"), "times as wide"),
    "strip_10000x3": ("strip.png", lambda: encode(Image.new("1", (10000, 3)), "PNG"), "times as wide"),
    "column_1x100000": ("column.png", lambda: encode(Image.new("1", (1, 100000)), "PNG"), "times as tall"),
    "side": ("wide.png", lambda: encode(Image.new("1", (MAX_SIDE + 1, 1001)), "PNG"), "on a side"),
}

#: Accepted files: name, bytes, a check of the decoded RGB image.
ACCEPTED: dict[str, tuple[str, Callable[[], bytes], Callable[[Image.Image], None]]] = {
    "gif_10000_frames": ("many.gif", lambda: animated_gif(10_000),
                         lambda img: img.info[FRAMES_INFO] == 10_000 and img.size == (16, 16)),
    "png_16bit": ("deep.png", lambda: encode(Image.fromarray(np.full((20, 30), 65535, np.uint16)), "PNG"),
                  lambda img: img.size == (30, 20) and img.getpixel((0, 0)) == (255, 255, 255)),
    "cmyk_jpeg": ("print.jpg", lambda: encode(Image.new("CMYK", (30, 20), (0, 255, 255, 0)), "JPEG", quality=95),
                  lambda img: np.allclose(img.getpixel((15, 10)), (255, 0, 0), atol=3)),
    "palette_transparency": ("logo.png", palette_with_transparency,  # transparent → white, opaque kept
                             lambda img: img.getpixel((5, 5)) == (255, 255, 255)
                             and img.getpixel((30, 5)) == (255, 0, 0)),
}


@pytest.fixture(scope="module")
def refused_files(tmp_path_factory) -> dict[str, tuple[Path, bytes, str]]:
    folder = tmp_path_factory.mktemp("refused")
    out = {}
    for key, (name, make, words) in REFUSED.items():
        data = make()
        (folder / key).mkdir()
        path = folder / key / name
        path.write_bytes(data)
        out[key] = (path, data, words)
    return out


@pytest.fixture(scope="module")
def accepted_files(tmp_path_factory) -> dict[str, tuple[Path, bytes, Callable]]:
    folder = tmp_path_factory.mktemp("accepted")
    out = {}
    for key, (name, make, check) in ACCEPTED.items():
        data = make()
        path = folder / name
        path.write_bytes(data)
        out[key] = (path, data, check)
    return out


class NetworkLoaded(BaseException):
    """Raised by the patched network loader: the CLI got past its checks of the image. (A BaseException: the CLI
    reports any Exception as an internal error, and this one must reach the test.)"""


@pytest.fixture
def no_network(monkeypatch):
    """The CLI's network loader raises NetworkLoaded instead of loading."""
    from iba_core.cli import common

    def load(*args, **kwargs):
        raise NetworkLoaded

    monkeypatch.setattr(common, "load_from_args", load)


# ---- the library -------------------------------------------------------------------------------


@pytest.mark.parametrize("key", REFUSED)
def test_library_refuses_with_one_sentence(key, refused_files, monkeypatch) -> None:
    path, data, words = refused_files[key]
    # Sizes are judged from the header: no pixel may be decoded for them.
    if key.startswith(("strip", "column", "side")):
        monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: pytest.fail("pixels were decoded"))
    for source in (path, data):
        with pytest.raises(ImageError, match=words) as info:
            load_image(source)
        assert_one_sentence(str(info.value))


def test_the_limits_are_stated_in_the_sentence(refused_files) -> None:
    with pytest.raises(ImageError) as ratio:
        load_image(refused_files["strip_10000x3"][0])
    assert "10000 × 3" in str(ratio.value) and f"at most {MAX_ASPECT_RATIO} times" in str(ratio.value)
    with pytest.raises(ImageError) as side:
        load_image(refused_files["side"][0])
    assert f"{MAX_SIDE:,} pixels on a side" in str(side.value)


@pytest.mark.parametrize("key", ACCEPTED)
def test_library_accepts_unusual_images(key, accepted_files) -> None:
    path, data, check = accepted_files[key]
    for source in (path, data):
        img = load_image(source)
        assert img.mode == "RGB" and check(img), (key, img.size, img.getpixel((0, 0)))


# ---- the command line --------------------------------------------------------------------------


@pytest.mark.parametrize("key", REFUSED)
def test_cli_refuses_before_the_network_loads(key, refused_files, no_network) -> None:
    path, _, words = refused_files[key]
    result = run_cli(["attribute", path])  # NetworkLoaded would propagate: the image must be refused first
    message = cli_error(result)
    assert words in message, message
    assert_one_sentence(message)
    assert result.out == ""


@pytest.mark.parametrize("key", ACCEPTED)
def test_cli_accepts_unusual_images(key, accepted_files, no_network) -> None:
    path, _, _ = accepted_files[key]
    with pytest.raises(NetworkLoaded):
        run_cli(["attribute", path])


# ---- the app's Per-Sample page -----------------------------------------------------------------


def _upload(at, name: str, data: bytes):
    at.file_uploader[0].set_value((name, data, "application/octet-stream")).run()
    return at


def _information_used(at) -> str:
    return {m.label: m.value for m in at.metric}["Information used"]


def test_app_refuses_each_upload_and_keeps_the_result(open_page, refused_files) -> None:
    at = open_page("per_sample")
    at.number_input(key="ps_steps").set_value(2)
    at.button(key="ps_run_button").click().run()
    assert not page_errors(at)
    before = _information_used(at)
    at.radio(key="image_source").set_value("Upload").run()
    for key, (path, data, words) in refused_files.items():
        errors = page_errors(_upload(at, path.name, data))
        assert len(errors) == 1 and words in errors[0], (key, errors)
        assert path.name in errors[0], "the refused upload is named"
        assert_one_sentence(errors[0])
        assert not at.get("form"), f"{key}: no Run form without a usable image"
        assert _information_used(at) == before, f"{key}: the previous result must stay visible"
    # The page still works: a good upload gives the Run form again.
    good = encode(Image.new("RGB", (64, 48), (90, 120, 30)), "PNG")
    assert not page_errors(_upload(at, "good.png", good))
    assert at.get("form")


def test_app_accepts_unusual_uploads(open_page, accepted_files) -> None:
    at = open_page("per_sample")
    at.radio(key="image_source").set_value("Upload").run()
    for key, (path, data, _) in accepted_files.items():
        errors = page_errors(_upload(at, path.name, data))
        assert not errors, (key, errors)
        assert at.get("form"), f"{key}: the Run form is offered"
