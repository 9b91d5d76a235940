"""Per-Sample Bottleneck page, driven through Streamlit's AppTest."""
from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest
from PIL import Image
from streamlit.testing.v1 import AppTest

from page_helpers import assert_clean, timed_run

from iba_core.app.inputs import image_digest
from iba_core.app.state import RunRecord
from iba_core.render.overlays import part_of_total_text
from iba_core.render.text import format_probability


def metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def plotly_specs(at: AppTest) -> dict[str, dict]:
    """Plotly charts by their element key (the page keys every chart)."""
    charts = at.get("plotly_chart")
    return {c.key: json.loads(c.proto.spec) for c in charts if c.key}


def percent(text: str) -> float:
    return float(re.sub(r"[^\d.eE+-]", "", text))


def use_upload(at: AppTest) -> AppTest:
    at.radio(key="image_source").set_value("Upload").run()
    assert_clean(at)
    return at


def run_button(at: AppTest):
    return at.button(key="ps_run_button")


def download(files: dict, suffix: str) -> bytes:
    """The bytes of the one offered file whose name ends with `suffix`."""
    names = [n for n in files if n.endswith(suffix)]
    assert len(names) == 1, (suffix, list(files))
    data = files[names[0]]()
    return data.encode() if isinstance(data, str) else data


def replay_slider(at: AppTest):
    return next(s for s in at.slider if s.label == "Replay step")


def shown_step(at: AppTest) -> str:
    """The replay's 'Step t / T · … bits · p(target) = …' line."""
    texts = [m.value for m in at.markdown if m.value.startswith("**Step ")]
    assert len(texts) == 1, texts
    return texts[0].strip("*")


def gif_bytes(frames: int = 3) -> bytes:
    """An animated GIF of chelsea (each frame a little darker), as a user would upload it."""
    import skimage.data

    photo = Image.fromarray(np.ascontiguousarray(skimage.data.chelsea()))
    pictures = [photo.point(lambda v, k=k: int(v * (1 - 0.2 * k))) for k in range(frames)]
    buf = io.BytesIO()
    pictures[0].save(buf, format="GIF", save_all=True, append_images=pictures[1:], duration=200, loop=0)
    return buf.getvalue()


def test_run_on_sample_photo_shows_heatmap_and_numbers(open_page, downloads, lock_waits) -> None:
    at = open_page("per_sample")
    assert at.selectbox(key="sample_name").value == "chelsea"
    assert at.selectbox(key="network").value == "efficientnet_lite0"
    targets = next(r for r in at.radio if r.label == "Class to explain")
    assert "Egyptian cat" in targets.format_func(targets.value)  # top-1 preselected

    at, seconds = timed_run(run_button(at).click())
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]

    m = metrics(at)
    total_bits = float(m["Information used"].replace(",", "").split()[0])
    assert total_bits > 0
    for label in ("p(target) without bottleneck", "p(target) with bottleneck"):
        assert 0.0 <= percent(m[label]) <= 100.0
    assert abs(percent(m["p(target) without bottleneck"]) - 35.5) < 1.0  # chelsea → Egyptian cat

    # Time: the optimisation, with the statistics' time beside it.
    record = at.session_state["ps_run"]
    assert isinstance(record, RunRecord)  # results are kept as dataclasses, not dicts
    assert lock_waits and all(lock_waits)  # the network taken through the waiting helper
    time_metric = next(x for x in at.metric if x.label == "Optimisation time")
    assert time_metric.value == f"{record.result.seconds:.1f} s"
    assert time_metric.proto.delta.endswith(" statistics")

    heat = plotly_specs(at)["ps_heatmap"]["data"][0]
    assert heat["type"] == "heatmap"
    assert heat["colorbar"]["title"]["text"] == "bits / pixel"

    assert record.result.heatmap.shape == (224, 224)
    assert np.isclose(record.result.heatmap.sum(), total_bits, rtol=1e-3)
    assert len(record.result.history) == 10
    # crop preview, overlay, few-bits view, and the replay's bits map, λ map and curves
    assert len(at.image) >= 6
    assert {b.label for b in at.get("download_button")} >= {"Overlay PNG", "Heatmap .npy", "JSON report",
                                                            "Animation GIF"}
    assert seconds < 120, f"one Run took {seconds:.0f} s"

    # The GIF: the 10 steps, then the final map, held; the report splits the times too.
    gif = Image.open(io.BytesIO(download(downloads, "_steps.gif")))
    assert gif.format == "GIF" and gif.n_frames == 11
    gif.seek(10)
    assert gif.info["duration"] >= 2500
    report = json.loads(download(downloads, ".json"))
    assert report["results"]["statistics_seconds"] is not None and report["results"]["seconds"] > 0
    assert report["results"]["target_note"] == "" and report["results"]["predicted"]["index"] == 285

    # One run, one total: the replay's summary, its last step, the GIF's final frame, the metric and the report.
    from iba_core.render.animation import final_text, step_bits

    shown = f"{record.result.total_bits:,.0f} bits"
    last_run = next(m.value for m in at.markdown if m.value.startswith("**Last run:**"))
    assert f"**Last run:** {shown}" in last_run
    assert shown_step(at).startswith(f"Step 10 / 10 · {shown} · ")
    assert f" · {shown} · " in final_text(record.result)
    assert m["Information used"] == shown
    assert f"{report['results']['total_bits']:,.0f} bits" == shown
    assert step_bits(record.result.history[-1]) == pytest.approx(record.result.total_bits, rel=1e-4)

    # Moving a result slider reruns the script; the result must survive without recomputing.
    at.slider(key="ps_opacity").set_value(0.3).run()
    assert_clean(at)
    assert at.session_state["ps_run"] is record
    assert metrics(at)["Information used"] == m["Information used"]


def stated_top(at: AppTest) -> str:
    """The top of the scale the replay's caption states ("… 0 – 0.752 bits / pixel …")."""
    caption = next(c.value for c in at.caption if c.value.startswith("Bits maps:"))
    return re.search(r"0 – ([\d.,e+-]+) bits / pixel", caption).group(1)


def colour_bar_top(at: AppTest) -> float:
    """The top of the final map's colour scale (its zmax), checked against its colour bar's top label."""
    heat = plotly_specs(at)["ps_heatmap"]["data"][0]
    assert heat["colorbar"]["tickvals"][-1] == heat["zmax"]
    return heat["zmax"]


def test_one_colour_scale_across_replay_final_map_overlay_and_gif(open_page, downloads, monkeypatch) -> None:
    """By default each step's map is drawn from 0 to its own largest value, live and in the replay (the drain stays
    visible as the maps empty: on one scale they went black or flat), and the final map, the overlay and the GIF's
    last frame on the final map's largest value; the whole run's on request, or the user's top, for every map."""
    from iba_core.render import animation
    from iba_core.render.animation import GIF_SIDE
    from iba_core.render.colours import BITS_LABEL, run_scale

    drawn: list[tuple[float, float]] = []  # (the map's largest value, the top it was drawn on)
    real = animation.bits_panel

    def recording(bits, top, **kw):
        drawn.append((float(np.max(bits)), float(top)))
        return real(bits, top, **kw)

    monkeypatch.setattr(animation, "bits_panel", recording)  # the page imports it at each run
    at = open_page("per_sample")
    at.number_input(key="ps_steps").set_value(3)
    run_button(at).click().run()
    assert_clean(at)
    result = at.session_state["ps_run"].result
    basis = at.selectbox(key="ps_scale_basis")
    assert basis.value == "final" and basis.options[0] == "each map's own largest value"
    final_top = float(result.heatmap.max())
    run_top = max(float(m.max()) for m in [*(h.bits_per_pixel for h in result.history), result.heatmap])
    assert final_top < run_top  # the bits drain: step 1 tops above the result
    live = [top for _, top in drawn[1:4]]  # after the blank stand-in: one per step
    assert live == pytest.approx([float(h.bits_per_pixel.max()) for h in result.history], rel=1e-6)
    assert drawn[-1] == pytest.approx((final_top, final_top), rel=1e-6)  # the replay's last step: the final map
    assert run_scale(result).top == pytest.approx(final_top, rel=1e-6)
    assert colour_bar_top(at) == pytest.approx(final_top, rel=1e-6)
    heat = plotly_specs(at)["ps_heatmap"]["data"][0]
    assert heat["colorbar"]["title"]["text"] == BITS_LABEL  # absolute bits, never a normalised 0–1
    assert stated_top(at) == f"{final_top:.3g}"
    assert "each step's map from 0 to its own largest value" in " ".join(
        c.value for c in at.caption if c.value.startswith("Bits maps:"))
    assert any(f"{final_top:.3g} bits / pixel" in c.value for c in at.caption if c.value.startswith("Inferno"))
    replay_slider(at).set_value(1).run()
    assert drawn[-1] == pytest.approx((run_top, run_top), rel=1e-6)  # step 1 on its own top: no flat square
    overlay = Image.open(io.BytesIO(download(downloads, "_overlay.png")))
    assert overlay.width == 451 and overlay.height > 300  # chelsea at its size, the legend below
    gif = Image.open(io.BytesIO(download(downloads, "_steps.gif")))
    assert gif.n_frames == 4 and gif.width > 2 * GIF_SIDE

    # The whole run's largest value instead: the maps show the drain, everywhere alike.
    at.selectbox(key="ps_scale_basis").set_value("run").run()
    assert_clean(at)
    assert colour_bar_top(at) == pytest.approx(run_top, rel=1e-6) and stated_top(at) == f"{run_top:.3g}"
    replay_slider(at).set_value(3).run()
    assert drawn[-1] == pytest.approx((final_top, run_top), rel=1e-6)  # the last step on the run's one scale
    at.selectbox(key="ps_scale_basis").set_value("final").run()

    # A top the user sets replaces it everywhere.
    at.number_input(key="ps_scale_top").set_value(0.25).run()
    assert_clean(at)
    assert colour_bar_top(at) == 0.25 and stated_top(at) == "0.25"
    assert "(set by you)" in " ".join(c.value for c in at.caption)

    # The choice holds for the session: another page and back keep it (a widget's state alone would not).
    at.number_input(key="ps_scale_top").set_value(None).run()
    at.selectbox(key="ps_scale_basis").set_value("run").run()
    at.switch_page("pages/compare.py").run()
    at.switch_page("pages/per_sample.py").run()
    assert_clean(at)
    assert at.session_state["ps_scale_basis"] == "run"


def test_low_p_target_gets_a_note_on_the_page_and_in_the_report(open_page, downloads) -> None:
    """The astronaut photo: the network's top-1 is a guess (ping-pong ball, a few %); the page says so."""
    at = open_page("per_sample")
    at.selectbox(key="sample_name").set_value("astronaut").run()
    assert_clean(at)
    at.number_input(key="ps_steps").set_value(2)
    run_button(at).click().run()
    assert_clean(at)
    result = at.session_state["ps_run"].result
    assert result.p_without < 0.10 and result.target_note
    notes = [w.value for w in at.warning if result.target_note in w.value]
    assert len(notes) == 2, [w.value for w in at.warning]  # next to the replay and in the Result section
    report = json.loads(download(downloads, ".json"))
    assert report["results"]["target_note"] == result.target_note


def test_replay_slider_shows_the_chosen_step(open_page) -> None:
    at = open_page("per_sample")
    at.number_input(key="ps_steps").set_value(3)
    run_button(at).click().run()
    assert_clean(at)
    history = at.session_state["ps_run"].result.history
    slider = replay_slider(at)
    assert (slider.min, slider.max, slider.value) == (1, 3, 3)
    last = shown_step(at)
    # p(target) as a percentage, as everywhere else on the page (not a fraction).
    assert last.startswith("Step 3 / 3 · ") and f"p(target) = {format_probability(history[2].p_target)}" in last
    assert re.search(r"p\(target\) = [\d.]+ % on its batch", last), last
    pictures = [im.proto.imgs[0].url for im in at.image]

    replay_slider(at).set_value(1).run()
    assert_clean(at)
    first = shown_step(at)
    assert first.startswith("Step 1 / 3 · ") and f"{history[0].bits_per_pixel.sum():,.0f} bits" in first
    assert [im.proto.imgs[0].url for im in at.image] != pictures, "the maps must change with the step"

    # The colour scale: each map's own largest value, or a value typed in.
    assert "each step's map from 0 to its own largest value" in " ".join(c.value for c in at.caption)
    at.number_input(key="ps_scale_top").set_value(0.25).run()
    assert_clean(at)
    assert "0.25 bits / pixel (set by you)" in " ".join(c.value for c in at.caption)


def test_lost_class_warning_at_large_beta(open_page) -> None:
    from iba_core.per_sample import LOST_CLASS_MESSAGE

    at = open_page("per_sample")
    at.select_slider(key="ps_beta").set_value(1000.0)
    at.number_input(key="ps_steps").set_value(6)
    run_button(at).click().run()
    assert_clean(at)
    record = at.session_state["ps_run"]
    assert record.result.lost_class, (record.result.p_without, record.result.p_with)
    warnings = [w.value for w in at.warning if LOST_CLASS_MESSAGE in w.value]
    assert warnings, [w.value for w in at.warning]
    assert "35." in warnings[0]  # p(target) without the bottleneck is named


def test_few_bits_view_states_the_guarantee_honestly(open_page) -> None:
    at = open_page("per_sample")  # the paper's 10 steps: after 2, every pixel still passes > 1 bit
    run_button(at).click().run()
    assert_clean(at)
    heat = at.session_state["ps_run"].result.heatmap
    total = at.session_state["ps_run"].result.total_bits
    if (heat < 0.05).any():
        caption = next(c.value for c in at.caption if c.value.startswith("Greyed and outlined"))
        passed = float(heat[heat < 0.05].astype(np.float64).sum())
        part, whole = part_of_total_text(passed, total)
        assert f"**{part} bits** of the {whole} —" in caption
    else:  # nothing below the threshold: said so, not "0 % … few, but not zero"
        assert any(c.value.startswith("No part of the crop is below 0.05 bits / pixel") for c in at.caption)
        assert not any("few, but not zero" in c.value for c in at.caption)
    at.select_slider(key="ps_threshold").set_value(1.0).run()  # the largest threshold greys part of the crop
    assert (heat < 1.0).any()
    caption = next(c.value for c in at.caption if c.value.startswith("Greyed and outlined"))
    part, whole = part_of_total_text(float(heat[heat < 1.0].astype(np.float64).sum()), total)
    assert f"**{part} bits** of the {whole} —" in caption
    assert float(part.replace(",", "")) <= float(whole.replace(",", ""))
    text = " ".join(m.value for m in at.markdown)
    assert "zero bits" in text and "through the bottleneck" in text and "not covered" in text
    assert "**Few bits**" in text and "Not needed" not in text and "provably" not in text.lower()


def test_upload_of_a_real_photo_works(open_page, chelsea_png: bytes, downloads) -> None:
    at = use_upload(open_page("per_sample"))
    assert any("image file to upload" in i.value and "GIF" in i.value for i in at.info), \
        "an empty uploader should say what to do, and which files it takes"
    at.file_uploader[0].set_value(("chelsea.png", chelsea_png, "image/png")).run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    assert any("Top prediction: Egyptian cat" in c for im in at.image for c in im.captions)

    at.number_input(key="ps_steps").set_value(3)
    run_button(at).click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    record = at.session_state["ps_run"]
    assert record.image_name == "chelsea.png"
    assert record.image_digest == image_digest(chelsea_png)
    assert len(record.result.history) == 3

    # The overlay download has the uploaded image's resolution.
    uploaded = Image.open(io.BytesIO(chelsea_png))
    overlay = Image.open(io.BytesIO(download(downloads, "_overlay.png")))
    assert uploaded.size == (451, 300)
    assert overlay.width == 451 and 300 < overlay.height < 360  # the photo at its size, and the legend below
    button = next(b for b in at.get("download_button") if b.label == "Overlay PNG")
    assert "451 × 300 px" in button.help and "dimmed" in button.help

    # Another photo under the same file name: the kept run is told apart by its pixels, not its name.
    assert not any("This run is of" in c.value for c in at.caption)
    mirrored = io.BytesIO()
    uploaded.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(mirrored, format="PNG")
    at.file_uploader[0].set_value(("chelsea.png", mirrored.getvalue(), "image/png")).run()
    assert_clean(at)
    assert at.session_state["ps_run"].run_id == record.run_id  # the last run stays shown …
    assert any("This run is of another image also named chelsea.png, not of the image chosen above" in c.value
               for c in at.caption)  # … saying it is of another image


def test_gif_upload_uses_the_first_frame(open_page) -> None:
    at = use_upload(open_page("per_sample"))
    at.file_uploader[0].set_value(("cat.gif", gif_bytes(3), "image/gif")).run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    assert any("GIF: the network sees the first frame of its 3 frames" in c.value for c in at.caption)
    assert any("Top prediction" in c for im in at.image for c in im.captions)
    assert run_button(at) is not None


def test_unsupported_file_is_refused_with_its_reason(open_page) -> None:
    at = use_upload(open_page("per_sample"))
    heic = b"\x00\x00\x00\x18ftypheic" + bytes(200)
    at.file_uploader[0].set_value(("photo.heic", heic, "image/heic")).run()
    assert_clean(at)
    assert at.error, "the refused file must be named with the reason, not just the generic upload hint"
    assert at.error[0].value == ("The file photo.heic is not a readable image "
                                 "(supported: PNG, JPEG, WebP, BMP, TIFF, GIF).")


def test_tiny_and_extreme_images_get_a_warning(open_page) -> None:
    at = use_upload(open_page("per_sample"))
    for name, size, words in (("tiny.png", (20, 16), "upscaled"), ("strip.png", (1500, 200), "cropped away")):
        buf = io.BytesIO()
        Image.new("RGB", size, (90, 120, 30)).save(buf, format="PNG")
        at.file_uploader[0].set_value((name, buf.getvalue(), "image/png")).run()
        assert_clean(at)
        assert any(words in w.value for w in at.warning), [w.value for w in at.warning]


def test_corrupt_upload_shows_error_and_keeps_previous_result(open_page) -> None:
    at = open_page("per_sample")
    at.number_input(key="ps_steps").set_value(2)
    run_button(at).click().run()
    assert_clean(at)
    before = metrics(at)["Information used"]

    use_upload(at)
    at.file_uploader[0].set_value(("broken.png", b"\x89PNG\r\n\x1a\nthis is not really a png", "image/png")).run()
    assert_clean(at)
    assert at.error, "a corrupt upload must show st.error"
    assert "image" in at.error[0].value.lower()
    assert not at.get("form"), "no Run form without a usable image"
    assert metrics(at)["Information used"] == before, "the previous result must stay visible"


def test_unknown_class_name_shows_error(open_page) -> None:
    at = open_page("per_sample")
    at.text_input(key="ps_other").input("definitely not an imagenet class")
    run_button(at).click().run()
    assert_clean(at)
    assert at.error and "No class named" in at.error[0].value
    assert "ps_run" not in at.session_state

    # A part of a name that fits one class is enough; the run explains that class.
    at.text_input(key="ps_other").input("tabby")
    at.number_input(key="ps_steps").set_value(2)
    run_button(at).click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    assert at.session_state["ps_run"].result.target == 281

    # A part that fits several classes is refused, with the candidates: as the field's help says.
    help_text = at.text_input(key="ps_other").help
    assert "0–999" in help_text and "single class" in help_text and "candidates" in help_text
    at.text_input(key="ps_other").input("terrier")
    run_button(at).click().run()
    assert_clean(at)
    assert at.error and "classes:" in at.error[0].value and "Type more of the name" in at.error[0].value


def test_missing_weights_show_error_and_app_keeps_working(open_page) -> None:
    from iba_core.networks import find_weights, get_spec

    if find_weights(get_spec("resnet50")) is not None:
        pytest.skip("ResNet-50 weights are installed here; the missing-weights path cannot be shown")
    at = open_page("per_sample")
    at.selectbox(key="network").set_value("resnet50").run()
    assert_clean(at)
    assert at.error and "resnet50-0676ba61.pth" in at.error[0].value
    message = at.error[0].value
    assert "--" not in message and "'resnet50'" not in message and "Network menu" in message
    at.selectbox(key="network").set_value("efficientnet_lite0").run()
    assert_clean(at)
    assert not at.error
    assert run_button(at) is not None


def test_messages_use_the_apps_words() -> None:
    """The app shows a message with its own hint (no flags), the CLI with its; the titles are in the message."""
    from iba_core.errors import user_message
    from iba_core.networks import get_spec, missing_weights_error

    err = missing_weights_error(get_spec("resnet50"))
    cli, app = user_message(err, "cli"), user_message(err, "app")
    assert "resnet50-0676ba61.pth" in cli and "IBA_WEIGHTS_DIR" in cli and "--weights" in cli  # the CLI's wording
    assert "resnet50-0676ba61.pth" in app and "Network menu" in app and "EfficientNet-Lite0" in app
    assert "--" not in app and "IBA_WEIGHTS_DIR" not in app and "'resnet50'" not in app
    # the readout's messages (other network, none trained) are checked in tests/test_errors.py


def test_huge_upload_is_refused_with_a_message(open_page) -> None:
    from iba_core.app.inputs import MAX_UPLOAD_MB

    at = use_upload(open_page("per_sample"))
    too_big = b"\x89PNG\r\n\x1a\n" + bytes(MAX_UPLOAD_MB * 1024 * 1024)
    at.file_uploader[0].set_value(("huge.png", too_big, "image/png")).run()
    assert_clean(at)
    assert at.error and f"{MAX_UPLOAD_MB} MB" in at.error[0].value


def test_statistics_from_an_image_folder(open_page, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("IBA_DATA_DIRS", str(tmp_path))  # the app's owner lets visitors name this folder
    at = open_page("per_sample")
    at.number_input(key="ps_steps").set_value(1)
    at.text_input(key="ps_folder").input(str(tmp_path / "no_such_folder"))
    run_button(at).click().run()
    assert_clean(at)
    assert at.error and "Image folder not found" in at.error[0].value

    for i in range(4):
        Image.new("RGB", (300, 260), (60 * i, 120, 200 - 40 * i)).save(tmp_path / f"photo_{i}.jpg")
    at.text_input(key="ps_folder").input(str(tmp_path))
    run_button(at).click().run()
    assert_clean(at)
    assert not at.error, [e.value for e in at.error]
    record = at.session_state["ps_run"]
    assert record.stats_description.startswith("4 samples from folder")
    assert any("4 samples from folder" in c.value for c in at.caption)
    # the app asked for more samples than the folder holds: the note says so (issue #29.7)
    assert "samples were asked for, but the folder gave only 4 usable images" in record.stats_description


def test_the_drain_chart_has_one_point_per_step_live_and_in_the_replay(open_page, monkeypatch) -> None:
    """The total bits per step as a line chart beside the bits map: filled live, one more point at each step,
    then beside the replay with all the run's steps, the chosen step ringed."""
    from iba_core.render import animation

    drawn: list[tuple[list, int | None]] = []
    real = animation.drain_image

    def recording(history, **kw):
        drawn.append((animation.drain_points(history), kw.get("mark")))
        return real(history, **kw)

    monkeypatch.setattr(animation, "drain_image", recording)  # the page imports it at each run
    at = open_page("per_sample")
    at.number_input(key="ps_steps").set_value(4)
    run_button(at).click().run()
    assert_clean(at)
    result = at.session_state["ps_run"].result
    # Live: one picture per step, with one point per step so far and none ringed.
    assert [len(points) for points, _ in drawn[:4]] == [1, 2, 3, 4] and all(m is None for _, m in drawn[:4])
    points, mark = drawn[-1]  # the replay's
    assert [s for s, _ in points] == [1, 2, 3, 4] and mark == 4
    assert [b for _, b in points] == pytest.approx([animation.step_bits(h) for h in result.history], rel=1e-4)
    assert points[-1][1] == pytest.approx(result.total_bits, rel=1e-4)  # the last step is the final map

    replay_slider(at).set_value(2).run()
    assert_clean(at)
    assert drawn[-1][1] == 2 and len(drawn[-1][0]) == 4
