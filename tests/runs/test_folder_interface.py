"""The folder runner knows no method by name: every method goes through `prepare` and `attribute_batch` (issue
#26.1), so a plug-in method that batches gets whole chunks, and one that cannot get ready stops the run before any
image."""
from __future__ import annotations

import numpy as np
import pytest

from iba_core.errors import UserError
from iba_core.methods import Method
from iba_core.runs import FolderSettings, list_images, run_folder
from run_fixtures import write_noise_images


class _Mean(Method):
    """A plug-in that batches: the image's mean over colours, times (target + 1); it records its calls."""

    key = "mean_colour"
    name = "Mean colour"
    signed = True
    batched = True

    def __init__(self, **settings):
        super().__init__(**settings)
        self.calls: list[tuple[str, int]] = []

    def prepare(self, network) -> None:
        self.calls.append(("prepare", 0))

    def _compute_batch(self, network, x, targets):
        self.calls.append(("batch", x.shape[0]))
        return [x[i].mean(dim=0) * (t + 1) for i, t in enumerate(targets)]


class _NotReady(_Mean):
    key = "not_ready"

    def prepare(self, network) -> None:
        raise UserError("No checkpoint for this network.")


def test_a_plugin_method_gets_whole_chunks_after_prepare(tiny_net, tmp_path):
    write_noise_images(tmp_path / "images", 5)
    root, items = list_images(tmp_path / "images", class_index=tiny_net.class_index)
    method = _Mean()
    summary = run_folder(tiny_net, items, [method], tmp_path / "run", FolderSettings(batch_images=4), root=root)
    assert summary.rows == 5 and summary.errors == 0
    assert method.calls == [("prepare", 0), ("batch", 4), ("batch", 1)]  # prepared first, then chunk by chunk
    from iba_core import open_run

    run = open_run(tmp_path / "run")
    for i, row in run.table.iterrows():  # the maps are the method's own, for each image's target
        x = tiny_net.preprocess(tiny_net.preprocess.load(run.image_path(row)))
        expected = x[0].mean(dim=0) * (int(row["target"]) + 1)
        np.testing.assert_allclose(run.heatmap(i), expected.numpy(), rtol=2e-3, atol=2e-3 * float(expected.abs().max()))


def test_a_method_that_cannot_get_ready_stops_the_run_before_any_image(tiny_net, tmp_path):
    write_noise_images(tmp_path / "images", 2)
    root, items = list_images(tmp_path / "images", class_index=tiny_net.class_index)
    method = _NotReady()
    with pytest.raises(UserError, match="No checkpoint"):
        run_folder(tiny_net, items, [method], tmp_path / "run", FolderSettings(), root=root)
    assert not any((tmp_path / "run").rglob("*.parquet"))


def test_the_runner_has_no_per_method_case():
    """No method class is named in the folder run's modules, and nothing is asked by duck typing."""
    import inspect

    from iba_core.runs import folder, metric_columns, rows

    source = "".join(inspect.getsource(module) for module in (folder, rows, metric_columns))
    for name in ("PerSampleIBA", "ReadoutMethod", "isinstance(method", "hasattr(", "get_stats", "cached_readout"):
        assert name not in source, name
