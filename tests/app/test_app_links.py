"""iba_core.app.links: a view as query parameters and back, every bad value one sentence, uploads kept safely."""
from __future__ import annotations

import io
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image

from iba_core.app import links
from iba_core.app.inputs import image_digest, sample_input, upload_input
from iba_core.app.models import TORCHVISION_CHOICE, CardChoice
from iba_core.bottleneck import BETA_K_RANGE
from iba_core.errors import UserError


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def png(colour: tuple[int, int, int], size: tuple[int, int] = (40, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return buf.getvalue()


def network(layers=("a", "b"), classes=3, title="Net") -> SimpleNamespace:
    spec = SimpleNamespace(layers=list(layers), default_layer=layers[0], title=title)
    return SimpleNamespace(spec=spec, categories=[f"c{i}" for i in range(classes)], key="net")


def test_a_view_round_trips_through_its_params() -> None:
    view = links.View(image="chelsea", network="efficientnet_lite0", layer="block3_2", beta_k=100.0, target=281,
                      step=7)
    params = links.to_params(view)
    assert params == {"image": "chelsea", "network": "efficientnet_lite0", "layer": "block3_2", "beta_k": "100",
                      "target": "281", "step": "7"}
    assert all(len(v) <= 20 for v in params.values()), "values are short"
    assert links.from_params(params) == (view, [])
    # small β·k from the slider reads back exactly; a view with nothing given writes nothing
    small = links.View(beta_k=0.05)
    assert links.from_params(links.to_params(small)) == (small, [])
    assert links.to_params(links.View()) == {}
    # other parameters (Streamlit's embed options, trackers) are ignored, not refused
    assert links.from_params({"embed": "true", "utm_source": "x"}) == (links.View(), [])


def test_image_value_names_a_sample_or_an_upload() -> None:
    assert links.image_value(sample_input("coffee")) == "coffee"
    data = png((1, 2, 3))
    assert links.image_value(upload_input("x.png", data)) == "upload:" + image_digest(data)


@pytest.mark.parametrize("params, words", [
    ({"image": "no-such-photo"}, "not one of the sample photos"),
    ({"network": "resnet9000"}, "not offered on this server"),
    ({"network": "torchvision:not_a_model"}, "not offered on this server"),
    ({"network": "card:missing"}, "not offered on this server"),
    ({"beta_k": "1e9"}, "outside"),
    ({"beta_k": "nan"}, "outside"),
    ({"beta_k": "ten"}, "not a number"),
    ({"target": "tabby"}, "not a class index"),
    ({"target": "-3"}, "not a class index"),
    ({"step": "0"}, "not a replay step"),
    ({"step": str(links.MAX_STEP + 1)}, "not a replay step"),
    ({"layer": "x" * (links.MAX_VALUE_CHARS + 1)}, "too long"),
])
def test_each_bad_value_is_one_sentence_and_left_out(params: dict, words: str) -> None:
    view, problems = links.from_params({**params, "image": params.get("image", "chelsea")})
    assert len(problems) == 1 and words in problems[0], problems
    assert problems[0].endswith(".") and "\n" not in problems[0]
    name = next(iter(params))
    assert getattr(view, name) is None, "a bad value is left out of the view"
    if name != "image":
        assert view.image == "chelsea", "the rest of the link still opens"


def test_a_long_value_is_not_repeated() -> None:
    long = "<script>" + "x" * 200
    _, problems = links.from_params({"layer": long, "network": long[:90]})
    assert len(problems) == 2 and all("x" * 50 not in p for p in problems)


def test_beta_k_is_set_to_the_nearest_slider_value() -> None:
    view, problems = links.from_params({"beta_k": "3"})
    assert view.beta_k == 2.0 and len(problems) == 1 and "nearest value, 2" in problems[0]
    low, high = BETA_K_RANGE
    assert links.from_params({"beta_k": repr(high * 10)})[0].beta_k is None
    assert links.from_params({"beta_k": repr(low / 10)})[0].beta_k is None


def test_networks_are_looked_up_never_read_as_paths(tmp_path: Path) -> None:
    card = CardChoice(tmp_path / "fruit" / "fruit.toml", "fruit")
    broken = CardChoice(tmp_path / "bad.toml", "bad", error="unreadable")
    assert links.network_option("efficientnet_lite0") == "efficientnet_lite0"
    assert links.network_option("torchvision:resnet18") == TORCHVISION_CHOICE
    assert links.network_option("card:fruit", [card]) == str(card.path)
    assert links.network_option("card:bad", [card, broken]) is None
    # a card's path (or any path) in a link is not a network
    for value in (str(card.path), "card:../fruit/fruit", "/etc/passwd", "card:" + str(card.path)):
        assert links.network_option(value, [card]) is None
        assert links.from_params({"network": value}, [card])[0].network is None


def test_fit_checks_layer_and_class_against_the_network() -> None:
    net = network(layers=("a", "b"), classes=3, title="Net")
    view, problems = links.fit(links.View(layer="b", target=2), net)
    assert (view.layer, view.target, problems) == ("b", 2, [])
    view, problems = links.fit(links.View(layer="zz", target=3, beta_k=1.0), net)
    assert view == links.View(beta_k=1.0)
    assert len(problems) == 2
    assert "not a layer of Net" in problems[0] and "default layer, a" in problems[0]
    assert "not one of the 3 classes of Net" in problems[1]


def test_a_coiba_layer_range_round_trips_and_a_bad_one_is_one_sentence() -> None:
    view = links.View(image="chelsea", layer="block5_1", layer_range=("block5_1", "block6_2"), beta_k=1.0)
    params = links.to_params(view)
    assert list(params) == ["image", "layer", "range", "beta_k"] and params["range"] == "block5_1:block6_2"
    assert links.from_params(params) == (view, [])
    for bad in ("block5_1", "block5_1:", ":block6_2", "a:b:c"):
        view, problems = links.from_params({"image": "chelsea", "range": bad})
        assert view == links.View(image="chelsea") and len(problems) == 1, (bad, problems)
        assert "not two layer names as FIRST:LAST" in problems[0] and problems[0].endswith(".")


def test_fit_checks_a_layer_range_as_coiba_would(offline_model) -> None:
    view, problems = links.fit(links.View(layer_range=("block5_1", "block6_2")), offline_model)
    assert view.layer_range == ("block5_1", "block6_2") and problems == []
    for bad, words in ((("block6_2", "block5_1"), "runs backwards"), (("block5_1", "block99"), "block99")):
        view, problems = links.fit(links.View(layer_range=bad, beta_k=1.0), offline_model)
        assert view == links.View(beta_k=1.0) and len(problems) == 1, problems
        assert words in problems[0] and "is left out." in problems[0], problems


def test_uploads_are_kept_once_and_read_back(private_cache: Path) -> None:
    data = png((10, 20, 30))
    digest = links.keep_upload("cat.png", data)
    assert digest == image_digest(data)
    path = links.upload_path(digest)
    assert path.is_file() and path.parent == private_cache / links.UPLOADS_KIND
    assert links.kept_upload(digest) == ("cat.png", data)
    mtime = path.stat().st_mtime_ns
    assert links.keep_upload("again.png", data) == digest  # the same content: kept once, under its first name
    assert links.kept_upload(digest)[0] == "cat.png" and path.stat().st_mtime_ns >= mtime
    # a link to it opens; to an upload that is gone, it says so
    view, problems = links.from_params({"image": "upload:" + digest})
    assert view.upload_digest == digest and problems == []
    path.unlink()
    view, problems = links.from_params({"image": "upload:" + digest})
    assert view.image is None and problems == [links.UPLOAD_GONE]
    assert links.kept_upload(digest) is None


def test_a_damaged_or_swapped_upload_is_not_served(private_cache: Path) -> None:
    first, second = png((1, 1, 1)), png((2, 2, 2))
    d1, d2 = links.keep_upload("a.png", first), links.keep_upload("b.png", second)
    # one kept file put in the other's place: its bytes do not fit the digest it is asked for
    os.replace(links.upload_path(d2), links.upload_path(d1))
    with pytest.warns(UserWarning, match="unusable"):
        assert links.kept_upload(d1) is None
    assert not links.upload_path(d1).exists(), "removed, so it is never served"
    links.keep_upload("a.png", first)
    links.upload_path(d1).write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="unusable"):
        assert links.kept_upload(d1) is None


@pytest.mark.parametrize("digest", [
    "../../etc/passwd", "0123456789abcdef/..", "0123456789ABCDEF", "0123456789abcde", "0123456789abcdef0",
    "0123456789abcdeg", "", "%2e%2e%2f", "0123456789abcde\n",
])
def test_only_hex_digests_of_fixed_length_name_an_upload(digest: str) -> None:
    with pytest.raises(UserError, match="16 hex digits"):
        links.upload_path(digest)
    assert links.kept_upload(digest) is None
    view, problems = links.from_params({"image": "upload:" + digest})
    assert view.image is None and len(problems) == 1
    assert "16 hex digits" in problems[0] or "too long" in problems[0]


def test_kept_uploads_are_bounded_oldest_first(private_cache: Path) -> None:
    digests = []
    for i in range(5):
        digests.append(links.keep_upload(f"{i}.png", png((i, i, i))))
        os.utime(links.upload_path(digests[-1]), (1000 + i, 1000 + i))  # distinct ages, oldest first
    folder = links.upload_path(digests[0]).parent
    removed = links.prune_uploads(folder, max_files=3)
    assert sorted(removed) == sorted(links.upload_path(d) for d in digests[:2])
    assert [links.kept_upload(d) is not None for d in digests] == [False, False, True, True, True]
    # by size: room for about two of the remaining files
    size = links.upload_path(digests[-1]).stat().st_size
    links.prune_uploads(folder, max_mb=2.5 * size / 2**20)
    assert [links.upload_path(d).exists() for d in digests[2:]] == [False, True, True]


def test_keep_upload_bounds_the_folder(private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(links, "KEEP_UPLOADS", 2)
    digests = []
    for i in range(4):
        digests.append(links.keep_upload(f"{i}.png", png((50 + i, 0, 0))))
        os.utime(links.upload_path(digests[-1]), (1000 + i, 1000 + i))
    assert [links.upload_path(d).exists() for d in digests] == [False, False, True, True]


def test_a_read_only_cache_keeps_the_page_working(private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args, **kwargs):
        raise PermissionError("read-only")

    monkeypatch.setattr(links, "save_arrays", refuse)
    assert links.keep_upload("x.png", png((9, 9, 9))) is None


def test_result_note_names_what_a_kept_result_is_of() -> None:
    assert links.result_note("chelsea", "Net", "chelsea", "Net") == ""
    image = links.result_note("chelsea", "Net", "coffee", "Net")
    assert "of chelsea, not of the image chosen above" in image
    net = links.result_note("chelsea", "Net", "chelsea", "Other")
    assert net.startswith("This run used Net, not the network chosen above")
    both = links.result_note("chelsea", "Net", "coffee", "Other")
    assert "of chelsea with Net" in both
    refused = links.result_note("chelsea", "Net", None, "Net")
    assert "of chelsea" in refused and "no usable image" in refused


def test_result_note_tells_images_apart_by_content_not_name() -> None:
    # Two uploads called photo.jpg with different pixels: the digests differ, so the note appears.
    other = links.result_note("photo.jpg", "Net", "photo.jpg", "Net",
                              result_digest="0123456789abcdef", current_digest="fedcba9876543210")
    assert other.startswith("This run is of another image also named photo.jpg, not of the image chosen above")
    # The same pixels under another file name: the same image, no note.
    assert links.result_note("photo.jpg", "Net", "copy.jpg", "Net",
                             result_digest="0123456789abcdef", current_digest="0123456789abcdef") == ""
    # A result kept without a digest falls back to the name.
    assert links.result_note("photo.jpg", "Net", "photo.jpg", "Net", current_digest="fedcba9876543210") == ""
