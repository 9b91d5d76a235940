"""iba_core.render.animation: step pictures with labelled colour bars, the curves, the GIF, the colour scale."""
from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from iba_core.per_sample import StepInfo
from iba_core.render import animation
from render_helpers import blob


def draining(steps: int = 10) -> list[StepInfo]:
    """A run whose bits drain away: step t has (1 - t/(steps+2)) of the first step's bits."""
    return [
        StepInfo(step=t, steps=steps, lambda_mean=np.full((14, 14), 1.0 - t / (steps + 2)),
                 bits_per_pixel=blob() * (1.0 - t / (steps + 2)), ce=2.0 / t, info=100.0 / t, beta_info=3.0 / t,
                 p_target=0.3 + 0.05 * t)
        for t in range(1, steps + 1)
    ]


def test_colour_scale_defaults_to_the_first_steps_maximum() -> None:
    history = draining()
    first, last = history[0].bits_per_pixel, history[-1].bits_per_pixel
    assert animation.ColourScale().top_for(first, last) == pytest.approx(float(first.max()))
    assert animation.ColourScale(top=0.5).top_for(first, last) == 0.5
    assert animation.ColourScale(auto=True).top_for(first, last) == pytest.approx(float(last.max()))
    assert animation.ColourScale(auto=True, top=0.5).top_for(first, last) == pytest.approx(float(last.max()))
    assert animation.ColourScale().top_for(np.zeros((4, 4)), np.zeros((4, 4))) > 0  # never a zero-width scale
    assert "first step" in animation.ColourScale().describe(first)
    assert "0.5" in animation.ColourScale(top=0.5).describe()
    assert "own maximum" in animation.ColourScale(auto=True).describe()


def test_bits_drain_away_on_one_scale() -> None:
    """On the shared scale a later step looks darker; auto-scaled it looks as bright as the first."""
    history = draining()
    first = history[0].bits_per_pixel
    shared = [animation.colour_map(h.bits_per_pixel, animation.ColourScale().top_for(first, h.bits_per_pixel),
                                   "inferno") for h in history]
    auto = [animation.colour_map(h.bits_per_pixel, animation.ColourScale(auto=True).top_for(first, h.bits_per_pixel),
                                 "inferno") for h in history]
    brightness = [np.asarray(im, dtype=float).sum() for im in shared]
    assert brightness == sorted(brightness, reverse=True) and brightness[-1] < 0.6 * brightness[0]
    assert np.array_equal(np.asarray(auto[0]), np.asarray(auto[-1]))


def test_colour_bar_is_labelled() -> None:
    bar = animation.colour_bar(200, 2.0, "inferno", animation.BITS_LABEL)
    arr = np.asarray(bar)
    assert bar.height == 200 and bar.width > 40
    label_strip = arr[:, -14:]  # the rotated label sits at the right edge
    assert (label_strip < 128).any(), "the colour bar's label is missing"
    assert tuple(arr[0, 2]) == tuple(animation._lut("inferno")[255]) and tuple(arr[-1, 2]) == tuple(
        animation._lut("inferno")[0])


def test_panels_and_frame() -> None:
    history = draining(3)
    bits = animation.bits_panel(history[0].bits_per_pixel, 2.0)
    lam = animation.lambda_panel(history[0].lambda_mean)
    assert bits.mode == "RGB" and bits.width > animation.MAP_SIDE and bits.height > animation.MAP_SIDE
    assert lam.height == bits.height
    frame = animation.step_frame(history[1], 2.0)
    assert frame.width > bits.width + lam.width and frame.height > bits.height
    assert animation.step_text(history[1]).startswith("Step 2 / 3 · ")
    assert "bits" in animation.step_text(history[1]) and "p(target) = 0.40" in animation.step_text(history[1])
    assert animation.step_bits(history[1]) == pytest.approx(float(history[1].bits_per_pixel.sum()), rel=1e-6)


def test_curves_image_marks_the_step() -> None:
    history = draining(4)
    plain = animation.curves_image(history, total_steps=10, width=400, height=160)
    marked = animation.curves_image(history, total_steps=10, mark=2, width=400, height=160)
    assert plain.size == (400, 160)
    assert not np.array_equal(np.asarray(plain), np.asarray(marked))
    assert animation.curves_image([], total_steps=5).size == (520, 190)  # the live view before the first step


def test_animation_gif_has_one_labelled_frame_per_step() -> None:
    history = draining(10)
    data = animation.animation_gif(history)
    gif = Image.open(io.BytesIO(data))
    assert gif.format == "GIF" and gif.n_frames == 10
    assert gif.info.get("loop") == 0
    frames = []
    for i in range(gif.n_frames):
        gif.seek(i)
        frames.append(np.asarray(gif.convert("RGB")))
    # Every frame writes its own step, bits and p(target) in the header line: the headers differ.
    headers = [f[:24] for f in frames]
    assert all(not np.array_equal(a, b) for a, b in zip(headers, headers[1:]))
    # The GIF shows what step_frame draws.
    expected = np.asarray(animation.step_frame(history[0], float(history[0].bits_per_pixel.max())))
    assert frames[0].shape == expected.shape
    assert np.abs(frames[0].astype(int) - expected.astype(int)).mean() < 8
    with pytest.raises(ValueError):
        animation.animation_gif([])
