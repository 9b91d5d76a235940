"""iba_core.render: the field's yardsticks drawn (insertion / deletion and ROAD curves, the pointing picture).

Drawing reads the metrics' result objects by their attributes only, so plain stand-ins with those attributes
are enough here; tests/app/test_app_evaluation.py draws the library's own results."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from iba_core.render import figures, overlays
from iba_core.render.colours import METHOD_COLOURS, hex_rgb, method_colour, method_colours


def pixel_curves(ins, dele, ins_auc: float, del_auc: float) -> SimpleNamespace:
    n = len(ins if ins is not None else dele)
    return SimpleNamespace(fraction=np.linspace(0, 1, n), insertion=None if ins is None else np.asarray(ins),
                           deletion=None if dele is None else np.asarray(dele), insertion_auc=ins_auc,
                           deletion_auc=del_auc)


def test_insertion_deletion_figure_one_colour_per_method_with_the_areas() -> None:
    curves = {"a": pixel_curves([0.1, 0.5, 0.9], [0.9, 0.3, 0.1], 0.5, 0.4),
              "b": pixel_curves([0.2, 0.2, 0.8], [0.8, 0.7, 0.1], 0.35, 0.575)}
    fig = figures.insertion_deletion_figure(curves, {"a": "Method A"})
    assert len(fig.data) == 4  # insertion and deletion per method
    a_ins, a_del, b_ins, b_del = fig.data
    assert a_ins.name == "Method A · insertion AUC 0.500" and a_del.name == "Method A · deletion AUC 0.400"
    assert b_ins.name == "b · insertion AUC 0.350" and b_del.name == "b · deletion AUC 0.575"  # key if unnamed
    assert a_ins.line.color == a_del.line.color == method_colour(0) != b_ins.line.color == method_colour(1)
    assert list(a_ins.y) == [0.1, 0.5, 0.9] and list(a_del.x) == [0.0, 0.5, 1.0]
    assert a_ins.xaxis == "x" and a_del.xaxis == "x2"  # insertion left, deletion right
    assert fig.layout.xaxis.title.text == "share of pixels inserted"
    assert fig.layout.xaxis2.title.text == "share of pixels deleted"
    assert fig.layout.yaxis.title.text == "p(target)" and fig.layout.font.size >= 13


def test_insertion_deletion_figure_leaves_out_a_curve_not_measured() -> None:
    fig = figures.insertion_deletion_figure({"a": pixel_curves(None, [0.9, 0.1], float("nan"), 0.5)}, {})
    assert [t.name for t in fig.data] == ["a · deletion AUC 0.500"]


def test_road_figure_morf_solid_lerf_dashed_with_their_means() -> None:
    road = {"a": SimpleNamespace(removed=np.array([20.0, 50.0, 80.0]), morf=np.array([0.6, 0.3, 0.1]),
                                 lerf=np.array([0.9, 0.8, 0.6]), morf_score=1 / 3, lerf_score=23 / 30),
            "b": SimpleNamespace(removed=np.array([20.0, 50.0, 80.0]), morf=np.array([0.5, 0.5, 0.5]),
                                 lerf=np.array([0.5, 0.5, 0.5]), morf_score=0.5, lerf_score=0.5)}
    fig = figures.road_figure(road, {"a": "A", "b": "B"})
    assert [t.name for t in fig.data] == ["A · MoRF 0.333", "A · LeRF 0.767", "B · MoRF 0.500", "B · LeRF 0.500"]
    assert fig.data[0].line.dash is None and fig.data[1].line.dash == "dash"
    assert fig.data[0].line.color == fig.data[1].line.color == method_colour(0)
    assert list(fig.data[1].x) == [20.0, 50.0, 80.0] and list(fig.data[0].y) == [0.6, 0.3, 0.1]
    assert "removed" in fig.layout.xaxis.title.text and "ROAD" in fig.layout.title.text


def test_method_colours_are_the_charts_and_repeat() -> None:
    assert method_colour(0) == METHOD_COLOURS[0] and method_colour(len(METHOD_COLOURS)) == METHOD_COLOURS[0]
    assert hex_rgb("#EF553B") == (239, 85, 59)


def test_pointing_picture_marks_each_maximum_in_its_methods_colour() -> None:
    crop = Image.new("RGB", (100, 100), (0, 0, 0))
    out = overlays.pointing_picture(crop, [(10, 10, 40, 40)], [(20, 70), (80, 25)], tolerance=15)  # (row, column)
    assert out.size == (100, 100) and crop.getpixel((70, 20)) == (0, 0, 0)  # a copy
    assert out.getpixel((70, 20)) == hex_rgb(method_colour(0))  # the first method's dot
    assert out.getpixel((25, 80)) == hex_rgb(method_colour(1))
    assert out.getpixel((10, 25)) == overlays.OUTLINE_RGB  # the box's outline
    ring = np.asarray(out)[20, 70 + 15 - 2:70 + 15 + 3]  # the tolerance circle crosses row 20 near x = 85.5
    assert any(tuple(p) == hex_rgb(method_colour(0)) for p in ring)
    assert out.getpixel((55, 50)) == (0, 0, 0)  # nothing drawn elsewhere


def test_maxima_on_one_pixel_each_keep_a_visible_mark() -> None:
    """Two or three methods whose maps peak on the same pixel (item 7 of #38): every method's colour shows."""
    crop = Image.new("RGB", (100, 100), (0, 0, 0))
    colours = ["#FF0000", "#00FF00", "#0000FF"]
    for count in (2, 3):
        out = np.asarray(overlays.pointing_picture(crop, [(10, 10, 40, 40)], [(50, 50)] * count, tolerance=15,
                                                   colours=colours[:count]))
        window = out[50 - 15:50 + 16, 50 - 15:50 + 16].reshape(-1, 3)
        for colour in colours[:count]:  # a dot of radius 4 (about 50 px) of each colour, not only the last one's
            assert np.all(window == hex_rgb(colour), axis=1).sum() >= 30, (count, colour)
    alone = overlays.pointing_picture(crop, [(10, 10, 40, 40)], [(20, 70), (80, 25)], tolerance=15)
    assert alone.getpixel((70, 20)) == hex_rgb(method_colour(0))  # maxima apart are marked on their points


def test_a_methods_colour_is_fixed_by_its_place_in_the_registry_not_in_the_selection() -> None:
    registered = ["random", "saliency", "grad_cam", "iba_10"]
    alone = method_colours(["grad_cam"], registered)
    mixed = method_colours(["iba_10", "saliency", "grad_cam"], registered)
    assert alone["grad_cam"] == mixed["grad_cam"] == METHOD_COLOURS[2]
    assert mixed["iba_10"] == METHOD_COLOURS[3] and mixed["saliency"] == METHOD_COLOURS[1]
    assert method_colours(["mine", "grad_cam"], registered)["mine"] == METHOD_COLOURS[4]  # after the registered


def road_curves_of(morf, lerf) -> SimpleNamespace:
    return SimpleNamespace(removed=np.array([30.0, 60.0]), morf=np.asarray(morf), lerf=np.asarray(lerf),
                           morf_score=float(np.mean(morf)), lerf_score=float(np.mean(lerf)))


def test_the_charts_and_the_picture_draw_the_colours_given() -> None:
    colours = {"a": "#123456", "b": "#ABCDEF"}
    curves = {"b": pixel_curves([0.1, 0.9], [0.9, 0.1], 0.5, 0.5), "a": pixel_curves([0.2, 0.8], [0.8, 0.2], 0.5, 0.5)}
    fig = figures.insertion_deletion_figure(curves, {}, colours=colours)
    assert [t.line.color for t in fig.data] == ["#ABCDEF", "#ABCDEF", "#123456", "#123456"]
    road = {"b": road_curves_of([0.5, 0.2], [0.9, 0.8]), "a": road_curves_of([0.4, 0.1], [0.9, 0.9])}
    assert [t.line.color for t in figures.road_figure(road, {}, colours=colours).data] == \
        ["#ABCDEF", "#ABCDEF", "#123456", "#123456"]
    tiles = SimpleNamespace(fraction=np.linspace(0, 1, 3), scaled=lambda: (np.linspace(1, 0, 3), np.ones(3)))
    degradation = figures.degradation_figure({"b": tiles, "a": tiles}, {}, colours=colours)
    assert [t.line.color for t in degradation.data] == ["#ABCDEF", "#ABCDEF", "#123456", "#123456"]
    crop = Image.new("RGB", (100, 100), (0, 0, 0))
    out = overlays.pointing_picture(crop, [(10, 10, 40, 40)], [(20, 70)], tolerance=15, colours=["#ABCDEF"])
    assert out.getpixel((70, 20)) == hex_rgb("#ABCDEF")
