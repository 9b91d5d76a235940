"""iba_core.render.colours: one colour scale per run, colour maps, round ticks, colour bars and legends."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from PIL import Image, ImageDraw

from iba_core.render import colours
from render_helpers import draining_result


def test_run_scale_tops_at_the_final_map_by_default_or_the_runs_largest_value_or_the_users() -> None:
    res = draining_result()
    largest, final = float(res.history[0].bits_per_pixel.max()), float(res.heatmap.max())
    assert final < 0.5 * largest  # the bits drain: step 1 tops far above the result
    default = colours.run_scale(res)
    assert default == colours.ColourScale(pytest.approx(final), "final")
    assert default.clips(res.history[0].bits_per_pixel) and not default.clips(res.heatmap)  # earlier steps: "≥"
    assert "each step's map from 0 to its own largest value" in default.describe()
    assert f"The final map: 0 – {colours.tick_text(default.top)} bits / pixel, its largest value" in default.describe()
    run = colours.run_scale(res, basis="run")
    assert run.top == pytest.approx(largest)
    assert colours.run_scale(res, fixed=0.5) == colours.ColourScale(0.5, "set")
    assert colours.run_scale(res, fixed=0.0).top == pytest.approx(final)  # an empty or 0 field: the run's own
    # On the run basis the final map counts too (a run whose bits grow at the end), and a map of zeros still
    # gets a scale.
    grown = replace(res, heatmap=res.heatmap * 10)
    assert colours.run_scale(grown, basis="run").top == pytest.approx(10 * float(res.heatmap.max()))
    zeros = replace(res, history=[replace(h, bits_per_pixel=np.zeros((4, 4))) for h in res.history],
                    heatmap=np.zeros((4, 4)))
    assert 0 < colours.run_scale(zeros).top <= 1e-6
    assert "largest value over all steps and the final map" in run.describe()
    assert "0.5 bits / pixel (set by you)" in colours.run_scale(res, 0.5).describe()
    with pytest.raises(ValueError):
        colours.run_scale(res, basis="first")


def test_each_step_on_its_own_top_unless_the_run_has_one_fixed_scale() -> None:
    res = draining_result()
    default = colours.run_scale(res)
    for h in res.history:
        own = colours.step_scale(h.bits_per_pixel, default)
        assert own == colours.ColourScale(pytest.approx(float(h.bits_per_pixel.max())), "step")
        assert not own.clips(h.bits_per_pixel) and "this step's largest value" in own.describe()
    # the last step is the final map: its own top is the final map's, so the replay's last step and the result agree
    assert colours.step_scale(res.history[-1].bits_per_pixel, default).top == pytest.approx(default.top)
    for fixed in (colours.run_scale(res, basis="run"), colours.run_scale(res, 0.5)):
        assert colours.step_scale(res.history[0].bits_per_pixel, fixed) is fixed


def test_live_scale_only_grows_and_ends_on_the_run_wide_scale() -> None:
    res = draining_result()
    history = [replace(h, bits_per_pixel=h.bits_per_pixel * (3.0 if h.step == 4 else 1.0)) for h in res.history]
    res = replace(res, history=history, heatmap=history[-1].bits_per_pixel)
    tops = [colours.live_scale(history[:t]).top for t in range(1, len(history) + 1)]
    assert tops == sorted(tops) and tops[3] > tops[2]  # step 4 exceeds the first steps: the scale grows there
    assert tops[-1] == colours.run_scale(res, basis="run").top
    assert "so far" in colours.live_scale(history[:2]).describe()
    assert colours.live_scale(history, fixed=0.3).top == 0.3


def test_bits_drain_away_on_one_scale() -> None:
    """On the run-wide scale a later step looks darker, as its bits are fewer."""
    res = draining_result()
    top = colours.run_scale(res, basis="run").top
    brightness = [np.asarray(colours.colour_map(h.bits_per_pixel, top, "inferno"), dtype=float).sum()
                  for h in res.history]
    assert brightness == sorted(brightness, reverse=True) and brightness[-1] < 0.6 * brightness[0]


def test_colour_bar_is_labelled() -> None:
    bar = colours.colour_bar(200, 2.0, "inferno", colours.BITS_LABEL)
    arr = np.asarray(bar)
    assert bar.height == 200 and bar.width > 40
    label_strip = arr[:, -14:]  # the rotated label sits at the right edge
    assert (label_strip < 128).any(), "the colour bar's label is missing"
    assert tuple(arr[0, 2]) == tuple(colours.colour_lut("inferno")[255]) and tuple(arr[-1, 2]) == tuple(
        colours.colour_lut("inferno")[0])


@pytest.mark.parametrize("top", [61.8, 32.7, 0.0123, 1e-6, 3.0, 0.752, 1234.5])
@pytest.mark.parametrize("height, font_size", [(224, 17), (120, 13), (360, 19)])
def test_colour_bar_labels_never_overlap(top, height, font_size) -> None:
    """The stem's 61.8 drew '61.8' over '60': the top is always labelled and no tick label touches another."""
    font = colours.text_font(font_size)
    labels = colours.bar_labels(height, top, 0.0, font, clipped=False)
    assert labels[-1][2] == colours.tick_text(top) and labels[0][2] == "0"
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    boxes = sorted((y_text, y_text + colours.text_size(probe, text, font)[1]) for _, y_text, text in labels)
    assert all(lower[0] >= upper[1] for upper, lower in zip(boxes, boxes[1:])), (top, labels)
    # The ink as drawn (a glyph sits below its text origin): 32.7's "30" touched "32.7" in a browser walkthrough.
    ink = sorted(probe.textbbox((0, y_text), text, font=font)[1::2] for _, y_text, text in labels)
    assert all(lower[0] - upper[1] >= 2 for upper, lower in zip(ink, ink[1:])), (top, labels, ink)
    assert all(0 <= a and b <= height for a, b in boxes)
    texts = [t for _, t in colours.scale_labels(top)]
    assert len(texts) == len(set(texts)) and texts[-1] == colours.tick_text(top)
    if top == 61.8:
        assert texts == ["0", "20", "40", "61.8"]


def test_colour_legend_states_the_scale() -> None:
    legend = colours.colour_legend(451, 0.75)
    arr = np.asarray(legend).astype(int)
    assert legend.width == 451 and 20 < legend.height < 80
    row = arr[legend.height // 5 + 2]  # through the gradient: dark on the left, bright on the right
    assert row[12].sum() < 100 and row[-12].sum() > 500
    text = arr[-legend.height // 3:]
    assert (text[:, :40].sum(axis=-1) < 300).any() and (text[:, -40:].sum(axis=-1) < 300).any()  # "0" and the top
    assert colours.colour_legend(4000, 0.75).height > legend.height  # a photo's legend grows with it


def test_run_scale_can_top_at_the_final_map_and_earlier_steps_clip() -> None:
    from types import SimpleNamespace

    from iba_core.render.colours import run_scale

    steps = [SimpleNamespace(bits_per_pixel=np.full((4, 4), v)) for v in (4.0, 1.0, 0.5)]
    result = SimpleNamespace(history=steps, heatmap=np.full((4, 4), 0.5))
    assert run_scale(result, basis="run").top == 4.0 and run_scale(result, basis="run").source == "run"
    final = run_scale(result)  # the default
    assert final.source == "final"
    assert final.top == 0.5 and final.clips(steps[0].bits_per_pixel) and not final.clips(result.heatmap)
    assert "The final map: 0 – 0.5 bits / pixel, its largest value" in final.describe()
    assert run_scale(result, 2.0, basis="final").top == 2.0  # a typed top wins
