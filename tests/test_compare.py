"""compare() and the `compare` command line (the grid PNG: tests/render/test_render_comparison.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from iba_core.compare import compare, resolve_methods
from iba_core.errors import UserError

CHEAP = ["random", "gradient", "grad_cam"]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py says why


def test_compare_runs_methods_in_order_with_progress(offline_model, chelsea_x):
    calls = []
    maps = compare(offline_model, chelsea_x, 285, CHEAP, progress=lambda *a: calls.append(a))
    assert [m.key for m in maps] == CHEAP
    assert all(m.values.shape == (224, 224) and np.isfinite(m.values).all() for m in maps)
    assert calls == [(0, 3, "Random"), (1, 3, "Gradient"), (2, 3, "Grad-CAM"), (3, 3, "done")]


def test_compare_defaults_to_top1_and_reports_failures(offline_model, chelsea_x):
    errors = {}
    maps = compare(offline_model, chelsea_x, None, ["gradient", "integrated_gradients"],
                   settings={"integrated_gradients": {"steps": 0}}, on_error=lambda k, e: errors.update({k: e}))
    assert [m.key for m in maps] == ["gradient"]
    assert isinstance(errors["integrated_gradients"], UserError)
    with pytest.raises(UserError):
        compare(offline_model, chelsea_x, 285, ["integrated_gradients"], settings={"integrated_gradients": {"steps": 0}})


def test_resolve_methods():
    assert [m.key for m in resolve_methods("all")][:2] == ["random", "occlusion_8"]
    assert [m.key for m in resolve_methods("saliency, grad_cam")] == ["saliency", "grad_cam"]
    with pytest.raises(UserError, match="Unknown attribution method"):
        resolve_methods("saliency,nope")
    with pytest.raises(UserError):
        resolve_methods("")


def test_cli_writes_maps_grid_and_summary(tmp_path, capsys):
    from iba_core.cli import main
    from iba_core.images import load_sample

    image = tmp_path / "cat.png"
    load_sample("chelsea").save(image)
    out = tmp_path / "out"
    code = main(["compare", str(image), "--model", "efficientnet_lite0", "--methods", "random,gradient,grad_cam",
                 "--target", "Egyptian cat", "--out", str(out)])
    assert code == 0
    for key in CHEAP:
        values = np.load(out / f"{key}.npy")
        assert values.shape == (224, 224) and values.dtype == np.float32
    assert Image.open(out / "grid.png").format == "PNG"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["target"] == 285 and summary["class_name"] == "Egyptian cat"
    assert [m["key"] for m in summary["methods"]] == CHEAP and summary["failed"] == {}
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["methods"] == CHEAP


def test_cli_rejects_unknown_methods_and_layers(tmp_path, capsys):
    from iba_core.cli import main

    assert main(["compare", str(tmp_path / "x.png"), "--methods", "nope", "--out", str(tmp_path)]) == 1
    assert "Unknown attribution method" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "x.png"), "--layer", "conv9", "--out", str(tmp_path)]) == 1
    assert "no layer" in capsys.readouterr().err


def test_add_compare_parser_registers_the_subcommand():
    import argparse

    from iba_core.cli import compare

    parser = argparse.ArgumentParser()
    compare.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["compare", "img.png", "--model", "resnet50", "--out", "d", "--methods", "saliency"])
    assert args.func is compare.run and args.model == "resnet50" and args.methods == ["saliency"]
    assert args.layer is None and args.target is None


def test_compare_target_note_for_a_class_the_network_hardly_predicts(offline_model, chelsea_x):
    """chelsea is an Egyptian cat (p 0.36): no note; a class it hardly predicts gets one, with the bottleneck's p."""
    from types import SimpleNamespace

    from iba_core.compare import compare_target_note

    assert compare_target_note(offline_model, chelsea_x, 285) == ""
    note = compare_target_note(offline_model, chelsea_x, 1)  # goldfish
    assert "not the network's top prediction" in note and "below 10 %" in note and "rises" not in note
    iba = SimpleNamespace(extra={"p_with": 0.9, "total_bits": 10.0})
    raised = compare_target_note(offline_model, chelsea_x, 1, [SimpleNamespace(extra={}), iba])
    assert "rises to 90.0 % with the bottleneck" in raised
