"""iba_core.render.animation: step pictures with labelled colour bars, the curves, the GIF."""
from __future__ import annotations

import io
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from iba_core.render import animation, colours
from render_helpers import draining, draining_result


def test_panels_and_frame() -> None:
    history = draining(3)
    bits = animation.bits_panel(history[0].bits_per_pixel, 2.0)
    lam = animation.lambda_panel(history[0].lambda_mean)
    assert bits.mode == "RGB" and bits.width > animation.MAP_SIDE and bits.height > animation.MAP_SIDE
    assert lam.height == bits.height
    frame = animation.step_frame(history[1], 2.0)
    assert frame.width > bits.width + lam.width and frame.height > bits.height
    text = animation.step_text(history[1])
    assert text.startswith("Step 2 / 3 · ") and "bits" in text and "p(target) = 40.0 % on its batch" in text
    assert animation.step_bits(history[1]) == pytest.approx(float(history[1].bits_per_pixel.sum()), rel=1e-6)
    assert animation.step_text(history[1], total_bits=1234.4).startswith("Step 2 / 3 · 1,234 bits")
    # A class token's bits count in the step's total, as they do in the result's total_bits.
    assert animation.step_bits(replace(history[1], unlocated_bits=5.0)) == pytest.approx(
        animation.step_bits(history[1]) + 5.0)


def test_curves_image_marks_the_step() -> None:
    history = draining(4)
    plain = animation.curves_image(history, total_steps=10, width=400, height=160)
    marked = animation.curves_image(history, total_steps=10, mark=2, width=400, height=160)
    assert plain.size == (400, 160)
    assert not np.array_equal(np.asarray(plain), np.asarray(marked))
    assert animation.curves_image([], total_steps=5).size == (520, 190)  # the live view before the first step


def _gif_frames(data: bytes) -> tuple[list[np.ndarray], list[int]]:
    gif = Image.open(io.BytesIO(data))
    assert gif.format == "GIF" and gif.info.get("loop") == 0
    frames, durations = [], []
    for i in range(gif.n_frames):
        gif.seek(i)
        frames.append(np.asarray(gif.convert("RGB")))
        durations.append(gif.info["duration"])
    return frames, durations


def test_animation_gif_steps_then_a_held_final_frame() -> None:
    res = draining_result(10)
    frames, durations = _gif_frames(animation.animation_gif(res))
    assert len(frames) == 11  # ten steps and the final map
    # Each step long enough to read its line; the final frame held before the loop starts again.
    assert durations[:-1] == [animation.FRAME_MS] * 10 and 500 <= animation.FRAME_MS <= 800
    assert durations[-1] == animation.FINAL_FRAME_MS >= 2500
    # At least as large as the replay on screen: each map GIF_SIDE px, the frame over twice that wide.
    assert animation.GIF_SIDE >= 320 and frames[0].shape[1] > 2 * animation.GIF_SIDE
    # Every frame writes its own line (step, bits, p(target); then "Final map"): the headers differ.
    headers = [f[:40] for f in frames]
    assert all(not np.array_equal(a, b) for a, b in zip(headers, headers[1:]))
    # The GIF shows what the frame functions draw: each step on its own top, the final map on the run's scale.
    tops = animation.frame_tops(res)
    assert tops[0] == pytest.approx(float(res.history[0].bits_per_pixel.max()))
    assert tops[-1] == colours.run_scale(res).top
    drawn = animation.run_frames(res)
    expected = np.asarray(drawn[0])
    assert frames[0].shape == expected.shape
    assert np.abs(frames[0].astype(int) - expected.astype(int)).mean() < 8
    assert np.abs(frames[-1].astype(int) - np.asarray(drawn[-1]).astype(int)).mean() < 8
    assert animation.final_text(res).startswith(f"{animation.FINAL_TITLE} · {res.total_bits:,.0f} bits")
    # A fixed top changes every frame's colours.
    fixed, _ = _gif_frames(animation.animation_gif(res, colours.ColourScale(tops[-1] / 4, "set"), side=64,
                                                   font_size=9))
    assert fixed[0].shape[1] < frames[0].shape[1]
    with pytest.raises(ValueError):
        animation.animation_gif(replace(res, history=[]))




def test_gif_frames_draw_each_label_once_when_early_steps_clip() -> None:
    """On a top the user sets the early steps clip ("≥ top" on their colour bar) and the later ones do not.
    Every frame, decoded as the viewer composes it (GIF frames are stored as the part that changed), must show
    exactly what was drawn: the λ colour bar with its one label where the first frame has it, not a second "λ"
    left standing from a wider frame."""
    res = draining_result(10)
    scale = colours.run_scale(res, fixed=float(res.heatmap.max()))
    drawn = animation.run_frames(res, scale)
    assert scale.clips(res.history[0].bits_per_pixel) and not scale.clips(res.history[-1].bits_per_pixel)
    assert len({f.size for f in drawn}) == 1  # a clipped bar is not wider: nothing beside it moves
    frames, _ = _gif_frames(animation.animation_gif(res, scale))
    lam = animation.lambda_panel(res.lambda_mean, side=animation.GIF_SIDE, font_size=animation.GIF_FONT)
    bar_w = lam.width - animation.GIF_SIDE - 8  # the λ colour bar and its label, at the frame's right edge
    width = frames[0].shape[1]
    label_area = np.s_[:, width - 8 - bar_w:]
    for i, (frame, want) in enumerate(zip(frames, drawn)):
        assert frame.shape == np.asarray(want).shape
        diff = np.abs(frame.astype(int) - np.asarray(want).astype(int)).max(axis=2)
        assert (diff > 60).mean() < 1e-3, f"frame {i} differs from its drawing"
        assert np.array_equal(frame[label_area], frames[0][label_area]), f"frame {i}: λ colour bar differs"


def test_colour_bar_keeps_its_width_when_it_clips() -> None:
    plain = colours.colour_bar(200, 0.73, colours.BITS_CMAP, colours.BITS_LABEL)
    clipped = colours.colour_bar(200, 0.73, colours.BITS_CMAP, colours.BITS_LABEL, clipped=True)
    assert plain.size == clipped.size
    assert not np.array_equal(np.asarray(plain), np.asarray(clipped))  # "≥" is written


def test_a_narrow_curves_chart_keeps_its_legend_inside() -> None:
    """Beside λ the chart is narrow: the note on the p axis is shortened, never cut at the picture's edge."""
    history = draining(4)
    for width in (300, 420, 640):
        arr = np.asarray(animation.curves_image(history, total_steps=10, width=width, height=240, font_size=15))
        legend = arr[:22]
        assert (legend[:, -3:] == 255).all(), f"the legend runs off a {width} px chart"
        assert (legend[:, width // 2:] < 200).any()  # the legend's right half has text


def test_panels_padded_to_one_width_show_their_maps_at_one_size() -> None:
    history = draining(2)
    bits = animation.bits_panel(history[0].bits_per_pixel, 0.3)
    lam = animation.lambda_panel(history[0].lambda_mean)
    padded = animation.padded_to(lam, bits.width)
    assert padded.size == (bits.width, lam.height) and lam.width < bits.width
    assert np.array_equal(np.asarray(padded)[:, :lam.width], np.asarray(lam))
    assert animation.padded_to(bits, 10) is bits


def test_drain_image_draws_one_dot_per_step_and_rings_the_marked_one() -> None:
    history = draining(6)
    assert animation.drain_points(history) == [(h.step, pytest.approx(animation.step_bits(h))) for h in history]
    live = animation.drain_image(history[:3], total_steps=6, width=330, height=250)
    more = animation.drain_image(history[:4], total_steps=6, width=330, height=250)
    marked = animation.drain_image(history, total_steps=6, mark=2, width=330, height=250)
    assert live.size == more.size == marked.size == (330, 250)  # the live view swaps one picture for another
    dots = [np.asarray(p) for p in (live, more)]
    curve = [((d[..., 0] > 200) & (d[..., 1] < 120) & (d[..., 2] < 100)).sum() for d in dots]
    assert curve[1] > curve[0]  # one more step, one more dot and segment
    unmarked = animation.drain_image(history, total_steps=6, width=330, height=250)
    assert not np.array_equal(np.asarray(marked), np.asarray(unmarked))  # the replay's step ringed
    assert animation._short_count(150_000) == "150k" and animation._short_count(2_500) == "2.5k"


def test_drain_chart_names_its_axis_and_keeps_its_title_off_the_edge() -> None:
    """The y axis says "total bits" (rotated, at the left: a neighbouring colour bar's "bits / pixel" is not read as
    this axis's unit), and no glyph of the title touches the picture's left edge (it was clipped: "Iotal")."""
    picture = np.asarray(animation.drain_image(draining(6), total_steps=6, width=330, height=250)).astype(int)
    ink = picture.sum(axis=2) < 600  # darker than the white ground
    assert not ink[:, 0].any() and not ink[:, 1].any()
    axis_strip = ink[40:200, 2:18]  # where the rotated "total bits" sits, left of the tick labels
    assert axis_strip.sum() > 40 and axis_strip.any(axis=1).sum() > 40  # a word standing upright over many rows


def test_gif_frames_title_lambda_as_the_page_does() -> None:
    """A CoIBA run's λ is one mask shared by its layers, not a mean over channels: the frames say what the page says."""
    res = draining_result(3)
    default = animation.run_frames(res, side=64, font_size=9)
    shared = animation.run_frames(res, side=64, font_size=9, lambda_title="λ (shared by 12 layers)")
    assert len(shared) == len(default) == 4
    for a, b in zip(default, shared):  # the λ picture's title differs in every frame, steps and final
        assert a.size[1] == b.size[1] and not np.array_equal(np.asarray(a), np.asarray(b))
    same = animation.run_frames(res, side=64, font_size=9, lambda_title="λ (mean over channels)")
    assert np.array_equal(np.asarray(same[0]), np.asarray(default[0]))  # the default title is the one-layer bottleneck's


def _map_indices(frame: np.ndarray, side: int, font_size: int) -> np.ndarray:
    """The bits map of a frame (`animation._frame`'s layout: the step's line, then the bits panel's title) as
    indices into the inferno colours (0 = the scale's bottom, 255 = its top), by the nearest colour."""
    top_y = (font_size + 16) + (font_size + 10)
    pixels = frame[top_y:top_y + side, 8:8 + side].reshape(-1, 3).astype(int)
    lut = colours.colour_lut(colours.BITS_CMAP).astype(int)
    return np.argmin(((pixels[:, None, :] - lut[None]) ** 2).sum(axis=2), axis=1)


def test_a_real_runs_frames_are_neither_flat_saturated_nor_black_and_state_their_scale(
        offline_model, offline_stats, chelsea_x) -> None:
    """A real run drains from ~4 to ~0.7 bits / pixel within a few steps. On one scale its frames were flat squares
    in the top colour (the final map's top) or nearly black (step 1's top): every frame of the GIF must keep its
    map readable, and its colour bar must state the top it is drawn on — that step's own largest value."""
    from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck

    layer = offline_model.spec.default_layer
    res = PerSampleBottleneck.for_network(offline_model, layer, offline_stats,
                                          BottleneckSettings(steps=6, batch=4)).attribute(chelsea_x)
    firsts, lasts = res.history[0].bits_per_pixel, res.history[-1].bits_per_pixel
    assert float(firsts.max()) > 2 * float(lasts.max())  # the drain the old single scales could not show
    side, font = 128, 12
    frames, _ = _gif_frames(animation.animation_gif(res, side=side, font_size=font))
    tops = animation.frame_tops(res)
    assert len(frames) == len(tops) == len(res.history) + 1
    for i, frame in enumerate(frames):
        idx = _map_indices(frame, side, font)
        assert (idx >= 250).mean() < 0.05, f"frame {i}: {100 * (idx >= 250).mean():.0f} % of the map at the top colour"
        assert (idx <= 12).mean() < 0.5, f"frame {i}: {100 * (idx <= 12).mean():.0f} % of the map nearly black"
    # the old scales fail the same test: the final map's top saturates step 1, step 1's top blackens the last step
    assert (_map_indices(np.asarray(animation.step_frame(res.history[0], float(res.heatmap.max()), side=side,
                                                         font_size=font)), side, font) >= 250).mean() > 0.5
    assert (_map_indices(np.asarray(animation.step_frame(res.history[-1], float(firsts.max()), side=side,
                                                         font_size=font)), side, font) <= 12).mean() > 0.5
    # Honest: each frame's colour bar is the one drawn for its stated top, and that top is the map's largest value.
    drawn = animation.run_frames(res, side=side, font_size=font)
    maps = [*(h.bits_per_pixel for h in res.history), res.heatmap]
    y0 = (font + 16) + (font + 10)
    for i, (frame, top, bits) in enumerate(zip(drawn, tops, maps)):
        assert top == pytest.approx(float(bits.max()), rel=1e-6)
        bar = np.asarray(colours.colour_bar(side, top, colours.BITS_CMAP, colours.BITS_LABEL, font_size=font))
        shown = np.asarray(frame)[y0:y0 + side, 8 + side + 8:8 + side + 8 + bar.shape[1]]
        assert np.array_equal(shown, bar), f"frame {i}: its colour bar does not say {top:.3g}"
        other = np.asarray(colours.colour_bar(side, 1.5 * top, colours.BITS_CMAP, colours.BITS_LABEL, font_size=font))
        assert not np.array_equal(shown, other)
