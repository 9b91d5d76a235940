"""A CLIP model's similarity head in the pictures and texts (issue #30): a cosine is written as a number, never as a
percentage, named "similarity", and drawn on a −1…1 axis beside its fitting term 1 − cos."""
from types import SimpleNamespace

import pytest
from PIL import Image, ImageDraw

from iba_core.render.animation import _curve_series, _curves_plot, curves_image, step_text
from iba_core.render.text import format_target_score, target_score_name


def steps(n: int = 4):
    return [SimpleNamespace(step=i, steps=n, ce=-0.2 - 0.01 * i, beta_info=0.4 / i, p_target=-0.3 + 0.1 * i,
                            bits_per_pixel=[[0.5]], unlocated_bits=0.0) for i in range(1, n + 1)]


def test_a_similarity_is_a_number_named_so():
    assert target_score_name("similarity") == "similarity" and target_score_name("softmax") == "p(target)"
    assert format_target_score(-0.2041, "similarity") == "-0.204"
    assert format_target_score(0.42, "softmax") == "42.0 %"
    text = step_text(steps()[0], head="similarity")
    assert "similarity = -0.200 on its batch" in text and "p(target)" not in text and "%" not in text
    assert "p(target) = " in step_text(steps()[0])  # a classifier's line as before


def test_the_curves_draw_one_minus_cos_and_the_similarity_on_minus_one_to_one():
    history = steps()
    draw = ImageDraw.Draw(Image.new("RGB", (420, 300)))
    plot = _curves_plot(draw, history, None, 420, 300, None, 12, "similarity")
    assert plot.p_low == -1 and plot.y_p(-1) == pytest.approx(plot.bottom_y) and plot.y_p(1) == pytest.approx(plot.top_y)
    series = _curve_series(history, plot, "similarity")
    assert [name for name, _, _ in series] == ["1 − cos", "β·L_I", "similarity"]
    fit = [y for _, y in series[0][2]]
    assert fit == pytest.approx([plot.y_loss(1 + h.ce) for h in history])  # −cos shifted by 1: never below 0
    sims = [y for _, y in series[2][2]]
    assert all(plot.top_y <= y <= plot.bottom_y for y in sims)  # a negative cosine stays on the chart
    assert curves_image(history, head="similarity").size == (520, 190)
