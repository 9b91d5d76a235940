"""A folder run's row holds one p(target) of the unmodified network: `p_without` is `p_target` (fp32), whatever
precision the method ran in (issue #29.7: a bf16 run wrote p_without 0.7621 beside p_target 0.7555)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from iba_core import open_run, precision
from iba_core.heads import head_of, probabilities
from iba_core.methods import get_method
from iba_core.runs import list_images, run_folder
from run_fixtures import write_noise_images


def test_p_without_is_the_rows_fp32_p_target_when_the_method_runs_in_bf16(tiny_net, tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"amx_bf16"})  # let bf16 run on any CPU (emulated)
    write_noise_images(tmp_path / "images", 3)
    root, items = list_images(tmp_path / "images")
    method = get_method("iba_10", steps=2, batch=2, precision="bf16", stats_samples=16)
    run_folder(tiny_net, items, [method], tmp_path / "run", root=root)
    table = open_run(tmp_path / "run").table
    assert table["error"].isna().all() and (table["precision"] == "bf16").all()
    np.testing.assert_array_equal(table["p_without"].to_numpy(), table["p_target"].to_numpy())
    own = []
    for _, row in table.iterrows():
        x = tiny_net.preprocess(tiny_net.preprocess.load(root / row["image"]))
        with torch.no_grad():
            p = probabilities(tiny_net.model(x).float(), head_of(tiny_net))[0, int(row["target"])]
        assert row["p_target"] == pytest.approx(float(p), rel=1e-5)  # the unmodified network in fp32
        own.append(method.attribute(tiny_net, x, int(row["target"])).extra["p_without"])
    # the method's own bf16 pass is the same quantity, rounded otherwise: the row does not carry it
    np.testing.assert_allclose(own, table["p_target"].to_numpy(), atol=0.02)
