"""Issue #39's CoIBA case: `compare --methods coiba` failed on every sampled timm family on a CPU with bf16 (the
hook path's crash at the default precision, fixed with the bottleneck family). Checked here on the families that
`test_presets_everywhere` does not build: a windowed Swin (channels-last token grids) and a ConvNeXt-style CNN,
saved as timm folders, on the hook path, with bf16 forced and with "auto" on a bf16 CPU (faked where this one
lacks it: torch emulates bf16 on any CPU)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from iba_core.cli import main
from iba_core.images import load_image
from iba_core.methods import get_method
from iba_core.networks import load_network
from source_fixtures import save_timm_folder, write_image

pytestmark = pytest.mark.usefixtures("one_thread")

#: Tiny random members of the two families, 56 px: Swin's 4-px patches on a 14×14 grid of 7×7 windows.
FAMILIES = {
    "swin": ("swin_tiny_patch4_window7_224", dict(img_size=56, embed_dim=16, depths=(2, 2), num_heads=(1, 2))),
    "convnext": ("convnext_atto", dict(dims=(8, 16, 24, 32), depths=(1, 1, 2, 1))),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("coiba-families")
    return {key: save_timm_folder(root / key, name, **kwargs) for key, (name, kwargs) in FAMILIES.items()}


@pytest.fixture
def bf16_cpu(monkeypatch, tmp_path):
    """A CPU with bf16 matrix instructions and a fresh precision memo, so "auto" measures as on such a CPU."""
    from iba_core import precision

    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx512_bf16", "amx_bf16"})
    monkeypatch.setattr(precision, "cuda_bf16", lambda: False)
    monkeypatch.setattr(precision, "_disk_choices", lambda: tmp_path / "precision.json")


@pytest.mark.parametrize("precision", ["bf16", "auto"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_coiba_on_the_hook_path_in_bf16(folders, family, precision, bf16_cpu, tmp_path):
    net = load_network(folders[family])
    x = net.preprocess(load_image(write_image(tmp_path / "img.png")))
    amap = get_method("coiba", precision=precision, steps=2, batch=2, stats_samples=4).attribute(net, x, 0)
    extra = amap.extra
    assert extra["path"] == "hook" and len(extra["layers"]) >= 2  # a range, through forward hooks
    assert extra["precision"] == "bf16" if precision == "bf16" else extra["precision"] in ("fp32", "bf16")
    assert np.isfinite(amap.values).all() and amap.values.shape == (net.spec.crop,) * 2 and extra["total_bits"] > 0


def test_compare_coiba_on_a_bf16_cpu(folders, bf16_cpu, tmp_path, capsys):
    """The issue's command, at the default ("auto") precision, on both families."""
    image = write_image(tmp_path / "img.png")
    for family, folder in folders.items():
        out = tmp_path / family
        assert main(["compare", str(image), "--model", str(folder), "--methods", "coiba", "--out", str(out)]) == 0
        line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert line["methods"] == ["coiba"] and line["failed"] == [], family
        assert np.isfinite(np.load(out / "coiba.npy")).all()
