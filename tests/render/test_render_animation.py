"""iba_core.render.animation: step pictures with labelled colour bars, the curves, the GIF, the colour scale."""
from __future__ import annotations

import io
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image, ImageDraw

from iba_core.per_sample import StepInfo
from iba_core.render import animation
from render_helpers import blob, result


def draining(steps: int = 10) -> list[StepInfo]:
    """A run whose bits drain away: step t has (1 - t/(steps+2)) of the first step's bits."""
    return [
        StepInfo(step=t, steps=steps, lambda_mean=np.full((14, 14), 1.0 - t / (steps + 2)),
                 bits_per_pixel=blob() * (1.0 - t / (steps + 2)), ce=2.0 / t, info=100.0 / t, beta_info=3.0 / t,
                 p_target=0.3 + 0.05 * t)
        for t in range(1, steps + 1)
    ]


def draining_result(steps: int = 10):
    """A finished run whose last step is its final map (as per_sample records it)."""
    history = draining(steps)
    res = result()
    return replace(res, history=history, heatmap=history[-1].bits_per_pixel, lambda_mean=history[-1].lambda_mean,
                   total_bits=animation.step_bits(history[-1]))


def test_run_scale_is_the_runs_largest_value_or_the_users() -> None:
    res = draining_result()
    largest = float(res.history[0].bits_per_pixel.max())
    assert animation.run_scale(res).top == pytest.approx(largest)
    assert animation.run_scale(res, fixed=0.5) == animation.ColourScale(0.5, "set")
    assert animation.run_scale(res, fixed=0.0).top == pytest.approx(largest)  # an empty or 0 field: the run's own
    # The final map counts too (a run whose bits grow at the end), and a map of zeros still gets a scale.
    grown = replace(res, heatmap=res.heatmap * 10)
    assert animation.run_scale(grown).top == pytest.approx(10 * float(res.heatmap.max()))
    zeros = replace(res, history=[replace(h, bits_per_pixel=np.zeros((4, 4))) for h in res.history],
                    heatmap=np.zeros((4, 4)))
    assert 0 < animation.run_scale(zeros).top <= 1e-6
    assert "largest value over all steps and the final map" in animation.run_scale(res).describe()
    assert "0.5 bits / pixel (set by you)" in animation.run_scale(res, 0.5).describe()


def test_live_scale_only_grows_and_ends_on_the_run_scale() -> None:
    res = draining_result()
    history = [replace(h, bits_per_pixel=h.bits_per_pixel * (3.0 if h.step == 4 else 1.0)) for h in res.history]
    res = replace(res, history=history, heatmap=history[-1].bits_per_pixel)
    tops = [animation.live_scale(history[:t]).top for t in range(1, len(history) + 1)]
    assert tops == sorted(tops) and tops[3] > tops[2]  # step 4 exceeds the first steps: the scale grows there
    assert tops[-1] == animation.run_scale(res).top
    assert "so far" in animation.live_scale(history[:2]).describe()
    assert animation.live_scale(history, fixed=0.3).top == 0.3


def test_bits_drain_away_on_one_scale() -> None:
    """On the run's scale a later step looks darker, as its bits are fewer."""
    res = draining_result()
    top = animation.run_scale(res).top
    brightness = [np.asarray(animation.colour_map(h.bits_per_pixel, top, "inferno"), dtype=float).sum()
                  for h in res.history]
    assert brightness == sorted(brightness, reverse=True) and brightness[-1] < 0.6 * brightness[0]


def test_colour_bar_is_labelled() -> None:
    bar = animation.colour_bar(200, 2.0, "inferno", animation.BITS_LABEL)
    arr = np.asarray(bar)
    assert bar.height == 200 and bar.width > 40
    label_strip = arr[:, -14:]  # the rotated label sits at the right edge
    assert (label_strip < 128).any(), "the colour bar's label is missing"
    assert tuple(arr[0, 2]) == tuple(animation._lut("inferno")[255]) and tuple(arr[-1, 2]) == tuple(
        animation._lut("inferno")[0])


@pytest.mark.parametrize("top", [61.8, 32.7, 0.0123, 1e-6, 3.0, 0.752, 1234.5])
@pytest.mark.parametrize("height, font_size", [(224, 17), (120, 13), (360, 19)])
def test_colour_bar_labels_never_overlap(top, height, font_size) -> None:
    """The stem's 61.8 drew '61.8' over '60': the top is always labelled and no tick label touches another."""
    font = animation._font(font_size)
    labels = animation._bar_labels(height, top, 0.0, font, clipped=False)
    assert labels[-1][2] == animation._tick_text(top) and labels[0][2] == "0"
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    boxes = sorted((y_text, y_text + animation._text_size(probe, text, font)[1]) for _, y_text, text in labels)
    assert all(lower[0] >= upper[1] for upper, lower in zip(boxes, boxes[1:])), (top, labels)
    # The ink as drawn (a glyph sits below its text origin): 32.7's "30" touched "32.7" in a browser walkthrough.
    ink = sorted(probe.textbbox((0, y_text), text, font=font)[1::2] for _, y_text, text in labels)
    assert all(lower[0] - upper[1] >= 2 for upper, lower in zip(ink, ink[1:])), (top, labels, ink)
    assert all(0 <= a and b <= height for a, b in boxes)
    texts = [t for _, t in animation.scale_labels(top)]
    assert len(texts) == len(set(texts)) and texts[-1] == animation._tick_text(top)
    if top == 61.8:
        assert texts == ["0", "20", "40", "61.8"]


def test_colour_legend_states_the_scale() -> None:
    legend = animation.colour_legend(451, 0.75)
    arr = np.asarray(legend).astype(int)
    assert legend.width == 451 and 20 < legend.height < 80
    row = arr[legend.height // 5 + 2]  # through the gradient: dark on the left, bright on the right
    assert row[12].sum() < 100 and row[-12].sum() > 500
    text = arr[-legend.height // 3:]
    assert (text[:, :40].sum(axis=-1) < 300).any() and (text[:, -40:].sum(axis=-1) < 300).any()  # "0" and the top
    assert animation.colour_legend(4000, 0.75).height > legend.height  # a photo's legend grows with it


def test_panels_and_frame() -> None:
    history = draining(3)
    bits = animation.bits_panel(history[0].bits_per_pixel, 2.0)
    lam = animation.lambda_panel(history[0].lambda_mean)
    assert bits.mode == "RGB" and bits.width > animation.MAP_SIDE and bits.height > animation.MAP_SIDE
    assert lam.height == bits.height
    frame = animation.step_frame(history[1], 2.0)
    assert frame.width > bits.width + lam.width and frame.height > bits.height
    text = animation.step_text(history[1])
    assert text.startswith("Step 2 / 3 · ") and "bits" in text and "p(target) = 0.40 on its batch" in text
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
    # The GIF shows what the frame functions draw, on the run's one scale.
    top = animation.run_scale(res).top
    expected = np.asarray(animation.step_frame(res.history[0], top, side=animation.GIF_SIDE,
                                               font_size=animation.GIF_FONT))
    assert frames[0].shape == expected.shape
    assert np.abs(frames[0].astype(int) - expected.astype(int)).mean() < 8
    final = np.asarray(animation.final_frame(res, top, side=animation.GIF_SIDE, font_size=animation.GIF_FONT))
    assert np.abs(frames[-1].astype(int) - final.astype(int)).mean() < 8
    assert animation.final_text(res).startswith(f"{animation.FINAL_TITLE} · {res.total_bits:,.0f} bits")
    # A fixed top changes every frame's colours.
    fixed, _ = _gif_frames(animation.animation_gif(res, animation.ColourScale(top / 4, "set"), side=64,
                                                   font_size=9))
    assert fixed[0].shape[1] < frames[0].shape[1]
    with pytest.raises(ValueError):
        animation.animation_gif(replace(res, history=[]))


def test_run_scale_can_top_at_the_final_map_and_earlier_steps_clip() -> None:
    from types import SimpleNamespace

    import numpy as np

    from iba_core.render.animation import run_scale

    steps = [SimpleNamespace(bits_per_pixel=np.full((4, 4), v)) for v in (4.0, 1.0, 0.5)]
    result = SimpleNamespace(history=steps, heatmap=np.full((4, 4), 0.5))
    assert run_scale(result).top == 4.0 and run_scale(result).source == "run"
    final = run_scale(result, basis="final")
    assert final.top == 0.5 and final.clips(steps[0].bits_per_pixel) and not final.clips(result.heatmap)
    assert "final map's largest value" in final.describe()
    assert run_scale(result, 2.0, basis="final").top == 2.0  # a typed top wins
