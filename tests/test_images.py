"""Tests for iba_core.images: every input is built in code, no binary fixtures."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

from iba_core.errors import UserError
from iba_core.images import (
    FORMAT_INFO,
    FRAMES_INFO,
    MAX_ASPECT_RATIO,
    MAX_PIXELS,
    MAX_SIDE,
    SUPPORTED_UPLOAD_TYPES,
    ImageError,
    load_image,
    load_sample,
    sample_image_names,
)


def encode(img: Image.Image, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format=fmt, **kwargs)
    return buf.getvalue()


def gradient_rgb(width: int = 32, height: int = 24) -> Image.Image:
    x = np.linspace(0, 255, width, dtype=np.uint8)[None, :].repeat(height, axis=0)
    y = np.linspace(0, 255, height, dtype=np.uint8)[:, None].repeat(width, axis=1)
    return Image.fromarray(np.stack([x, y, 255 - x], axis=-1), mode="RGB")


def assert_rgb(img: Image.Image, size: tuple[int, int]) -> None:
    assert isinstance(img, Image.Image)
    assert img.mode == "RGB"
    assert img.size == size


# ---------------------------------------------------------------------------
# Accepted inputs
# ---------------------------------------------------------------------------


def test_rgb_png_roundtrip_from_path(tmp_path: Path) -> None:
    src = gradient_rgb()
    path = tmp_path / "img.png"
    src.save(path)
    out = load_image(path)
    assert_rgb(out, src.size)
    assert np.array_equal(np.asarray(out), np.asarray(src))
    # Also as a plain str path.
    assert np.array_equal(np.asarray(load_image(str(path))), np.asarray(src))


def test_output_is_detached_from_file(tmp_path: Path) -> None:
    path = tmp_path / "img.png"
    gradient_rgb().save(path)
    out = load_image(path)
    path.unlink()  # the loaded image must not need the file any more
    assert out.getpixel((0, 0)) == gradient_rgb().getpixel((0, 0))
    assert out.copy().size == (32, 24)


@pytest.mark.parametrize("wrap", [bytes, bytearray, io.BytesIO], ids=["bytes", "bytearray", "BytesIO"])
def test_in_memory_inputs(wrap) -> None:
    src = gradient_rgb()
    out = load_image(wrap(encode(src, "PNG")))
    assert_rgb(out, src.size)
    assert np.array_equal(np.asarray(out), np.asarray(src))


def test_bytesio_already_read_uses_getvalue() -> None:
    # Streamlit's UploadedFile keeps its position after a read(); getvalue() must still work.
    buf = io.BytesIO(encode(gradient_rgb(), "PNG"))
    buf.read()
    assert_rgb(load_image(buf), (32, 24))


def test_plain_binary_file_object(tmp_path: Path) -> None:
    path = tmp_path / "img.png"
    gradient_rgb().save(path)
    with open(path, "rb") as fh:  # has read() but no getvalue()
        assert_rgb(load_image(fh), (32, 24))


def test_pil_image_input_is_not_mutated() -> None:
    src = gradient_rgb().convert("RGBA")
    out = load_image(src)
    assert_rgb(out, src.size)
    assert src.mode == "RGBA"
    rgb = gradient_rgb()
    out2 = load_image(rgb)
    assert out2 is not rgb
    assert np.array_equal(np.asarray(out2), np.asarray(rgb))


@pytest.mark.parametrize("fmt", ["JPEG", "WEBP", "BMP", "TIFF"])
def test_other_supported_formats(fmt: str) -> None:
    src = gradient_rgb()
    out = load_image(encode(src, fmt))
    assert_rgb(out, src.size)
    # Lossy formats: just check it is close.
    diff = np.abs(np.asarray(out, dtype=int) - np.asarray(src, dtype=int))
    assert diff.mean() < 8


def test_jpeg_exif_orientation_is_applied() -> None:
    src = gradient_rgb(40, 20)
    exif = Image.Exif()
    exif[0x0112] = 6  # "rotate 90 CW to display"
    data = encode(src, "JPEG", exif=exif.tobytes(), quality=95)
    with Image.open(io.BytesIO(data)) as raw:
        assert raw.size == (40, 20)
    out = load_image(data)
    assert_rgb(out, (20, 40))
    # Orientation 6 means the stored left column becomes the displayed top row.
    expected = src.transpose(Image.Transpose.ROTATE_270)
    diff = np.abs(np.asarray(out, dtype=int) - np.asarray(expected, dtype=int))
    assert diff.mean() < 8


def test_gray_l() -> None:
    src = Image.fromarray(np.arange(64, dtype=np.uint8).reshape(8, 8) * 4, mode="L")
    out = load_image(encode(src, "PNG"))
    assert_rgb(out, (8, 8))
    arr = np.asarray(out)
    assert np.array_equal(arr[..., 0], np.asarray(src))
    assert np.array_equal(arr[..., 0], arr[..., 1]) and np.array_equal(arr[..., 1], arr[..., 2])


def test_bilevel_1() -> None:
    src = Image.new("1", (10, 6), 0)
    src.putpixel((3, 2), 1)
    out = load_image(encode(src, "PNG"))
    assert_rgb(out, (10, 6))
    assert out.getpixel((3, 2)) == (255, 255, 255)
    assert out.getpixel((0, 0)) == (0, 0, 0)


def test_palette_with_transparency() -> None:
    src = Image.new("P", (4, 4), 0)
    src.putpalette([255, 0, 0, 0, 0, 255] + [0] * (256 * 3 - 6))
    src.putpixel((1, 1), 1)  # blue, opaque
    data = encode(src, "PNG", transparency=0)  # index 0 (red) is transparent
    with Image.open(io.BytesIO(data)) as raw:
        assert raw.mode == "P" and "transparency" in raw.info
    out = load_image(data)
    assert_rgb(out, (4, 4))
    assert out.getpixel((0, 0)) == (255, 255, 255)  # transparent -> white, not red
    assert out.getpixel((1, 1)) == (0, 0, 255)


def test_palette_without_transparency() -> None:
    src = gradient_rgb().convert("P", palette=Image.Palette.ADAPTIVE, colors=16)
    out = load_image(encode(src, "PNG"))
    assert_rgb(out, src.size)
    assert np.array_equal(np.asarray(out), np.asarray(src.convert("RGB")))


def test_rgba_composited_on_white() -> None:
    arr = np.zeros((2, 3, 4), dtype=np.uint8)
    arr[0, 0] = (10, 20, 30, 255)  # opaque: kept
    arr[0, 1] = (0, 0, 0, 0)  # fully transparent black: becomes white
    arr[0, 2] = (0, 0, 0, 128)  # half transparent black: mid gray
    out = load_image(encode(Image.fromarray(arr, mode="RGBA"), "PNG"))
    assert_rgb(out, (3, 2))
    assert out.getpixel((0, 0)) == (10, 20, 30)
    assert out.getpixel((1, 0)) == (255, 255, 255)
    assert all(abs(c - 127) <= 2 for c in out.getpixel((2, 0)))


def test_la_composited_on_white() -> None:
    src = Image.new("LA", (2, 1), (0, 0))
    src.putpixel((1, 0), (50, 255))
    out = load_image(encode(src, "PNG"))
    assert out.getpixel((0, 0)) == (255, 255, 255)
    assert out.getpixel((1, 0)) == (50, 50, 50)


@pytest.mark.parametrize("fmt", ["JPEG", "TIFF"])
def test_cmyk(fmt: str) -> None:
    src = Image.new("CMYK", (8, 8), (0, 255, 255, 0))  # pure red in CMYK
    data = encode(src, fmt)
    with Image.open(io.BytesIO(data)) as raw:
        assert raw.mode == "CMYK"
    out = load_image(data)
    assert_rgb(out, (8, 8))
    r, g, b = out.getpixel((4, 4))
    assert r > 200 and g < 60 and b < 60


def test_16bit_gray_png_is_scaled_not_clipped() -> None:
    arr = np.array([[0, 32768, 65535, 257]], dtype=np.uint16)
    data = encode(Image.fromarray(arr), "PNG")
    with Image.open(io.BytesIO(data)) as raw:
        assert raw.mode in ("I;16", "I")  # PIL version dependent
    out = np.asarray(load_image(data))[0, :, 0]
    assert out[0] == 0
    assert abs(int(out[1]) - 128) <= 1
    assert out[2] == 255
    assert out[3] == 1


@pytest.mark.parametrize("mode", ["I;16", "I;16B"])
def test_16bit_pil_modes(mode: str) -> None:
    src = Image.fromarray(np.array([[0, 32768, 65535]], dtype=np.uint16))
    if src.mode != mode:
        # Via "I": PIL's direct I;16 -> I;16B conversion squashes values to 8 bits.
        src = src.convert("I").convert(mode)
    assert np.asarray(src).max() == 65535
    assert src.mode == mode
    out = np.asarray(load_image(src))[0, :, 0]
    assert list(out) == [0, 128, 255]


def test_32bit_int_gray() -> None:
    # 16-bit data in mode "I" (how older PIL opens 16-bit files) keeps the 16-bit scale.
    src = Image.fromarray(np.array([[0, 32768, 65535]], dtype=np.int32), mode="I")
    assert list(np.asarray(load_image(src))[0, :, 0]) == [0, 128, 255]
    # Values beyond 16 bits are stretched min..max rather than clipped.
    big = Image.fromarray(np.array([[-(2**20), 0, 2**20]], dtype=np.int32), mode="I")
    assert list(np.asarray(load_image(big))[0, :, 0]) == [0, 128, 255]


def test_float_gray() -> None:
    unit = Image.fromarray(np.array([[0.0, 0.5, 1.0]], dtype=np.float32), mode="F")
    assert list(np.asarray(load_image(unit))[0, :, 0]) == [0, 128, 255]
    hdr = Image.fromarray(np.array([[-5.0, 0.0, 5.0, np.nan]], dtype=np.float32), mode="F")
    out = load_image(hdr)
    assert_rgb(out, (4, 1))
    assert list(np.asarray(out)[0, :3, 0]) == [0, 128, 255]
    # Via a real file too (TIFF stores mode F).
    assert_rgb(load_image(encode(unit, "TIFF")), (3, 1))


# ---------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("source", [b"", bytearray(), io.BytesIO(b"")], ids=["bytes", "bytearray", "BytesIO"])
def test_empty_input_refused(source) -> None:
    with pytest.raises(ImageError, match="empty"):
        load_image(source)


def test_empty_file_refused(tmp_path: Path) -> None:
    path = tmp_path / "empty.png"
    path.write_bytes(b"")
    with pytest.raises(ImageError, match="empty"):
        load_image(path)


def test_missing_path_refused(tmp_path: Path) -> None:
    path = tmp_path / "nope.png"
    with pytest.raises(ImageError, match="not found") as info:
        load_image(path)
    assert "nope.png" in str(info.value)


def test_directory_refused(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="not a file"):
        load_image(tmp_path)


@pytest.mark.parametrize(
    "data",
    [b"hello, this is definitely not an image\n" * 10, bytes(range(256)), b"%PDF-1.4\n%%EOF\n"],
    ids=["text", "binary-noise", "pdf"],
)
def test_non_image_bytes_refused(data: bytes) -> None:
    with pytest.raises(ImageError, match="not a readable image") as info:
        load_image(data)
    assert "PNG" in str(info.value)


def test_text_file_refused(tmp_path: Path) -> None:
    path = tmp_path / "notes.png"
    path.write_text("just some text\n")
    with pytest.raises(ImageError, match="not a readable image"):
        load_image(path)


def test_unsupported_format_refused() -> None:
    # ICO decodes fine in PIL, but it is not on our list of allowed decoders.
    with pytest.raises(ImageError, match="not a readable image") as info:
        load_image(encode(gradient_rgb(), "ICO"))
    assert "GIF" in str(info.value)  # the message lists what is accepted


def test_gif_gives_its_first_frame() -> None:
    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255)]
    frames = [Image.new("RGB", (40, 30), c) for c in colours]
    data = encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    out = load_image(data)
    assert_rgb(out, (40, 30))
    assert out.getpixel((5, 5)) == colours[0]
    assert out.info[FRAMES_INFO] == 3 and out.info[FORMAT_INFO] == "GIF"
    still = load_image(encode(gradient_rgb(), "GIF"))
    assert still.info[FRAMES_INFO] == 1 and still.mode == "RGB"
    # A transparent GIF is composited on white, like a transparent PNG.
    clear = Image.new("P", (8, 8), 0)
    clear.putpalette([0, 0, 0] * 256)
    assert load_image(encode(clear, "GIF", transparency=0)).getpixel((0, 0)) == (255, 255, 255)
    assert load_image(encode(gradient_rgb(), "PNG")).info[FRAMES_INFO] == 1


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_truncated_file_refused(fmt: str, tmp_path: Path) -> None:
    # Noise does not compress, so half the file really is half the pixel data.
    rng = np.random.default_rng(0)
    src = Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8), mode="RGB")
    full = encode(src, fmt)
    half = full[: len(full) // 2]
    assert load_image(full).size == (64, 64)
    with pytest.raises(ImageError, match="truncated|damaged|incomplete"):
        load_image(half)
    path = tmp_path / f"half.{fmt.lower()}"
    path.write_bytes(half)
    with pytest.raises(ImageError, match="truncated|damaged|incomplete"):
        load_image(path)
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False


def assert_one_sentence(message: str) -> None:
    """One clear sentence: a single full stop, at the end (thousands separators are commas)."""
    assert message.endswith(".") and message.count(". ") == 0 and "(" not in message.split(":")[-1], message


def test_bomb_refused_with_small_limit() -> None:
    data = encode(Image.new("1", (2000, 1000)), "PNG")
    assert len(data) < 10_000  # tiny file, big image
    with pytest.raises(ImageError, match="too large") as info:
        load_image(data, max_pixels=1_000_000)
    msg = str(info.value)
    assert "2,000,000" in msg and "1,000,000" in msg
    assert_one_sentence(msg)
    # Just under the limit is fine.
    assert load_image(data, max_pixels=2_000_000).size == (2000, 1000)


def test_default_limit_refuses_over_40_megapixels(monkeypatch: pytest.MonkeyPatch) -> None:
    data = encode(Image.new("1", (10000, 5000)), "PNG")  # 50 MP, a few KB on disk
    assert MAX_PIXELS == 40_000_000

    # Refused from the header alone: no pixel decode may happen.
    def no_decode(self):  # pragma: no cover - must not be reached
        raise AssertionError("pixels were decoded before the size check")

    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decode)
    with pytest.raises(ImageError, match="too large") as info:
        load_image(data)
    assert "40,000,000" in str(info.value)


@pytest.mark.parametrize("size", [(20000, 1), (100000, 1), (1, 100000), (10000, 3)])
def test_extreme_aspect_ratio_refused_from_the_header(size, monkeypatch: pytest.MonkeyPatch) -> None:
    """Few pixels but a strip the preprocessing would blow up to gigabytes: refused before any decode."""
    data = encode(Image.new("1", size), "PNG")
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: pytest.fail("pixels were decoded"))
    with pytest.raises(ImageError, match="times as") as info:
        load_image(data)
    msg = str(info.value)
    assert f"{size[0]} × {size[1]}" in msg and f"at most {MAX_ASPECT_RATIO} times" in msg
    assert_one_sentence(msg)


def test_aspect_ratio_and_side_limits_are_exact() -> None:
    assert (MAX_SIDE, MAX_ASPECT_RATIO) == (20_000, 20)
    for size in [(400, 20), (20, 400)]:  # exactly 20 : 1 either way
        assert load_image(encode(Image.new("L", size), "PNG")).size == size
    with pytest.raises(ImageError, match="20.05 times as wide"):
        load_image(encode(Image.new("L", (401, 20)), "PNG"))
    with pytest.raises(ImageError, match="times as tall as it is wide"):
        load_image(Image.new("L", (20, 401)))  # in-memory images are bounded alike
    assert load_image(encode(Image.new("1", (MAX_SIDE, 1000)), "PNG")).size == (MAX_SIDE, 1000)


def test_side_over_the_limit_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    data = encode(Image.new("1", (MAX_SIDE + 1, 1001)), "PNG")  # 20 MP: under the pixel limit
    monkeypatch.setattr(ImageFile.ImageFile, "load", lambda self: pytest.fail("pixels were decoded"))
    with pytest.raises(ImageError, match="20,000 pixels on a side") as info:
        load_image(data)
    assert_one_sentence(str(info.value))


def test_huge_bomb_refused_without_touching_global_state() -> None:
    # Over PIL's own limit: PIL's DecompressionBombError/Warning must come out as ImageError.
    before = (Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES)
    data = encode(Image.new("1", (20000, 20000)), "PNG")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no stray warnings either
        with pytest.raises(ImageError, match="too large") as info:
            load_image(data)
        assert_one_sentence(str(info.value))
        assert "Decompression" not in str(info.value)  # PIL's own wording stays out of the message
        with pytest.raises(ImageError, match="too large") as info:
            load_image(data, max_pixels=10**10)
        # The limit named is the one that applied: PIL's, not the 10 billion asked for.
        assert f"{Image.MAX_IMAGE_PIXELS:,}" in str(info.value)
    assert (Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES) == before


def test_pil_image_over_limit_refused() -> None:
    with pytest.raises(ImageError, match="too large"):
        load_image(Image.new("RGB", (100, 100)), max_pixels=9_999)


def test_zero_size_image_refused() -> None:
    with pytest.raises(ImageError, match="no pixels"):
        load_image(Image.new("RGB", (0, 0)))
    with pytest.raises(ImageError, match="no pixels"):
        load_image(Image.new("RGB", (10, 0)))


def test_bad_arguments() -> None:
    with pytest.raises(TypeError):
        load_image(12345)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        load_image(b"x", max_pixels=0)


def test_image_error_is_a_user_error_not_a_value_error() -> None:
    # a bad file is the user's to fix; a library's ValueError is not (`errors.UserError`)
    assert issubclass(ImageError, UserError) and not issubclass(ImageError, ValueError)


def test_supported_upload_types() -> None:
    assert SUPPORTED_UPLOAD_TYPES == ("png", "jpg", "jpeg", "webp", "bmp", "tif", "tiff", "gif")


# ---------------------------------------------------------------------------
# Sample images (need scikit-image)
# ---------------------------------------------------------------------------


def test_unknown_sample_lists_valid_names() -> None:
    with pytest.raises(ImageError, match="chelsea"):
        load_sample("no-such-sample")


def test_sample_names() -> None:
    names = sample_image_names()
    assert {"chelsea", "coffee", "astronaut", "rocket"} <= set(names)
    assert len(names) == len(set(names))


def test_chelsea() -> None:
    pytest.importorskip("skimage")
    assert_rgb(load_sample("chelsea"), (451, 300))


@pytest.mark.parametrize("name", sample_image_names())
def test_every_sample_loads_as_rgb(name: str) -> None:
    pytest.importorskip("skimage")
    img = load_sample(name)
    assert img.mode == "RGB"
    assert img.width > 0 and img.height > 0
    assert img.width * img.height <= MAX_PIXELS


# ---------------------------------------------------------------------------
# Inputs of any channel count (issue #21): load_input, MultiBandImage
# ---------------------------------------------------------------------------


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def npy_header_only(shape: tuple[int, ...], descr: str = "<u2") -> bytes:
    """A .npy file whose header declares `shape` and which holds no data (a few bytes claiming gigabytes)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def assert_sentence(message: str) -> None:
    """One sentence for a user: no traceback, no line break, not too long, ends with a full stop."""
    assert message.endswith(".") and "\n" not in message and "Traceback" not in message and len(message) < 400


@pytest.mark.parametrize("dtype, scale", [(np.uint8, 255), (np.uint16, 65535), (np.int16, 32767)])
def test_integer_bands_are_scaled_by_their_types_maximum(dtype, scale) -> None:
    from iba_core.band_images import MultiBandImage, load_input

    data = (np.arange(16 * 18 * 4) % 251).reshape(16, 18, 4).astype(dtype)  # images have sides of 16 px or more
    image = load_input(npy_bytes(data), 4)
    assert isinstance(image, MultiBandImage) and image.size == (18, 16) and image.bands == 4
    np.testing.assert_allclose(image.data, data / scale, rtol=1e-6)
    assert image.data.dtype == np.float32


def test_float_bands_are_taken_as_they_are() -> None:
    from iba_core.band_images import load_input

    data = np.linspace(-3.0, 7.5, 16 * 18 * 13).reshape(16, 18, 13)  # float64, outside 0…1 on purpose
    np.testing.assert_allclose(load_input(npy_bytes(data), 13).data, data, rtol=1e-6)


def test_tiff_bands_read_alike_contiguous_planar_and_as_pages(tmp_path: Path) -> None:
    import tifffile

    from iba_core.band_images import load_input, read_image_size

    data = np.random.default_rng(0).random((20, 30, 5)).astype(np.float32)
    tifffile.imwrite(tmp_path / "contig.tif", data, photometric="minisblack", planarconfig="contig")
    tifffile.imwrite(tmp_path / "planar.tif", np.moveaxis(data, -1, 0), photometric="minisblack",
                     planarconfig="separate")
    tifffile.imwrite(tmp_path / "pages.tif", np.moveaxis(data, -1, 0), photometric="minisblack")  # one band a page
    for name in ("contig.tif", "planar.tif", "pages.tif"):
        np.testing.assert_array_equal(load_input(tmp_path / name, 5).data, data, err_msg=name)
        assert read_image_size(tmp_path / name) == (30, 20)
    # A 3-band float TIFF (PIL cannot decode it) serves an RGB network as bands.
    tifffile.imwrite(tmp_path / "rgb.tif", data[..., :3], photometric="minisblack", planarconfig="contig")
    np.testing.assert_array_equal(load_input(tmp_path / "rgb.tif", 3).data, data[..., :3])


def test_the_composite_stretches_the_display_bands() -> None:
    from iba_core.band_images import MultiBandImage

    ramp = np.linspace(0.0, 1.0, 101)[None, :].repeat(4, axis=0)  # 4 × 101, 0…1 along the width
    data = np.zeros((4, 101, 5))
    data[..., 3] = ramp
    data[..., 1] = 1.0 - ramp
    image = MultiBandImage(data, display_bands=[3, 1, 4])
    shown = np.asarray(image)
    assert shown.shape == (4, 101, 3) and shown.dtype == np.uint8 and image.size == (101, 4)
    # Red is band 3 stretched between its 2nd and 98th percentile (0.02 and 0.98): clipped below and above.
    assert shown[0, 2, 0] == 0 and shown[0, 98, 0] == 255 and shown[0, 0, 0] == 0 and shown[0, 100, 0] == 255
    assert shown[0, 50, 0] == 128  # (0.5 − 0.02) / 0.96 · 255 = 127.5 → 128
    np.testing.assert_array_equal(shown[..., 1], shown[:, ::-1, 0])  # green: band 1, the mirrored ramp
    assert not shown[..., 2].any()  # blue: band 4 is flat, shown black
    assert image.convert("RGB").mode == "RGB" and np.array_equal(np.asarray(image.convert("RGB")), shown)
    assert image.caption().startswith("bands 4, 2, 5 of 5, numbered from 1, shown as red, green, blue")
    # The first three bands by default; one band in gray.
    assert MultiBandImage(data).shown_bands() == (0, 1, 2)
    gray = np.asarray(MultiBandImage(data[..., 3:4]))
    assert (gray[..., 0] == gray[..., 2]).all() and gray[0, 50, 1] == 128


def test_a_grayscale_network_reads_photos_in_gray() -> None:
    from iba_core.band_images import load_input

    src = gradient_rgb()
    gray = load_input(encode(src, "PNG"), 1)
    assert gray.mode == "L" and gray.size == src.size
    np.testing.assert_array_equal(np.asarray(gray), np.asarray(src.convert("L")))
    assert gray.info[FORMAT_INFO] == "PNG"
    assert load_input(npy_bytes(np.ones((16, 20, 1), np.uint8)), 1).bands == 1  # one band as an array too


@pytest.mark.parametrize("data, channels, text", [
    (npy_bytes(np.zeros((8, 8, 4), np.uint8)), 3, "The file holds a 4-band image, but the network takes 3-channel (RGB)"),
    (npy_bytes(np.zeros((8, 8, 3), np.uint8)), 1, "holds a 3-channel (RGB) image, but the network takes 1-channel"),
    (encode(gradient_rgb(), "JPEG"), 4, "holds a 3-channel (RGB) image, but the network takes 4-band images; give"),
    (encode(gradient_rgb().convert("L"), "PNG"), 13, "holds a 1-channel (grayscale) image, but the network takes 13"),
    (npy_bytes(np.zeros((4, 8, 9), np.uint8)), 4, "its first axis has 4: save it as height × width × bands"),
    (npy_bytes(np.zeros((8, 8))), 4, "holds a 2-D array (8 × 8); an image is 3-D"),
    (npy_bytes(np.zeros((2, 8, 8, 4))), 4, "holds a 4-D array"),
    (npy_bytes(np.zeros((8, 8, 65), np.uint8)), 4, "has 65 bands (8 × 8 × 65); images may have at most 64"),
    (npy_bytes(np.zeros((0, 8, 4))), 4, "has no pixels (0 × 8 × 4)"),
    (npy_bytes(np.full((3, 3, 4), np.inf, np.float32)), 4, "holds NaN or infinite values"),
    (npy_bytes(np.full((3, 3, 4), 1e300)), 4, "holds NaN or infinite values"),  # beyond float32
    (npy_bytes(np.zeros((3, 3, 4), "U2")), 4, "holds <U2 values; an image's bands must be integers or floats"),
    (npy_bytes(np.zeros((3, 3, 4), np.complex64)), 4, "must be integers or floats"),
    (npy_bytes(np.zeros((8, 8, 4), np.uint16))[:-10], 4, ".npy file is truncated or damaged"),
    (npy_header_only((20_000, 20_000, 13)), 13, "The image is too large (20000 × 20000 = 400,000,000 pixels)"),
    (npy_header_only((6_000, 6_000, 13)), 13, "(6000 × 6000 × 13 = 468,000,000 values): images may hold at most"),
    (npy_header_only((10, 4_000, 4)), 4, "400 times as wide as it is tall"),
    (b"", 4, "The file is empty (0 bytes)"),
    (b"\x93NUMPY\x09\x00garbage", 4, "header is damaged or of an unknown format version"),
    (b"II*\x00" + b"\x00" * 20, 4, "The TIFF file is damaged"),
], ids=["4-for-rgb", "3-for-gray", "jpeg-for-4", "gray-png-for-13", "channels-first", "2-d", "4-d", "65-bands",
        "empty-array", "inf", "beyond-float32", "strings", "complex", "truncated", "bomb-pixels", "bomb-values",
        "strip", "empty-file", "bad-header", "bad-tiff"])
def test_arrays_and_files_that_do_not_fit_are_refused_with_one_sentence(data, channels, text) -> None:
    from iba_core.band_images import load_input

    with pytest.raises(ImageError) as info:
        load_input(data, channels)
    assert text in str(info.value)
    assert_sentence(str(info.value))


def test_sizes_are_read_from_the_npy_header(tmp_path: Path) -> None:
    from iba_core.band_images import read_image_size

    (tmp_path / "tile.npy").write_bytes(npy_header_only((30, 40, 4)))  # no data: the header alone is read
    assert read_image_size(tmp_path / "tile.npy") == (40, 30)
    (tmp_path / "huge.npy").write_bytes(npy_header_only((20_000, 20_000, 4)))
    with pytest.raises(ImageError, match="too large"):
        read_image_size(tmp_path / "huge.npy")


def test_display_bands_are_checked_against_the_bands() -> None:
    from iba_core.band_images import MultiBandImage, check_display_bands

    assert check_display_bands([3, 2, 1], 4) == (3, 2, 1) and check_display_bands(None, 4) is None
    for bad in ([0, 1, 4], [0, 1], [0, 1, -1], [0, 1, True], "0,1,2", [0.0, 1, 2]):
        with pytest.raises(ImageError, match="display_bands must be three band numbers .* from 0 to 3") as info:
            check_display_bands(bad, 4)
        assert_sentence(str(info.value))
    with pytest.raises(ImageError):
        MultiBandImage(np.zeros((2, 2, 4)), display_bands=[0, 1, 7])


def test_uploads_and_folders_take_npy_files(tmp_path: Path) -> None:
    from iba_core.images import find_images
    from iba_core.band_images import upload_types

    assert upload_types(3) == SUPPORTED_UPLOAD_TYPES + ("npy",) and upload_types(1) == upload_types(3)
    assert upload_types(4) == ("npy", "tif", "tiff")
    np.save(tmp_path / "a.npy", np.zeros((2, 2, 4)))
    (tmp_path / "notes.txt").write_text("no image")
    assert [p.name for p in find_images(tmp_path)] == ["a.npy"]
