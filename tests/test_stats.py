"""FeatureStats: stable accumulation, sources, cache, corrupt files."""
import numpy as np
import pytest
import torch
from PIL import Image

from iba_core import stats as stats_mod
from iba_core.stats import FeatureStats, _RunningMoments, get_stats, stats_cache_path


def test_running_moments_match_numpy_even_with_a_large_offset():
    rng = np.random.default_rng(0)
    data = 1e6 + rng.normal(size=(1000, 3, 2, 2)).astype(np.float32) * 0.01
    moments = _RunningMoments()
    for chunk in np.array_split(data, 17):
        moments.update(torch.from_numpy(chunk))
    mean, std = moments.result()
    ref = data.astype(np.float64)
    np.testing.assert_allclose(mean.numpy(), ref.mean(0), rtol=1e-12)
    np.testing.assert_allclose(std.numpy(), ref.std(0, ddof=1), rtol=1e-6)
    assert moments.n == 1000


def test_floored_std_handles_dead_channels():
    s = FeatureStats(torch.zeros(2, 1, 1), torch.tensor([[[0.0]], [[0.5]]]), 5)
    assert s.floored_std().flatten().tolist() == pytest.approx([0.01, 0.5])


def _folder(tmp_path, n_good=5):
    root = tmp_path / "imgs"
    (root / "sub").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i in range(n_good):
        folder = root / "sub" if i % 2 else root
        Image.fromarray(rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)).save(folder / f"{i}.png")
    (root / "broken.jpg").write_bytes(b"\xff\xd8\xff garbage")
    (root / "notes.txt").write_text("not an image")
    return root


def test_folder_source_skips_and_counts_unreadable(offline_model, tmp_path):
    s = get_stats(offline_model, "block3_2", images=_folder(tmp_path))
    assert s.n == 5 and s.skipped == 1 and s.is_rough
    assert "1 unreadable" in s.describe() and "fewer than 1000" in s.describe()
    assert s.mean.shape == (40, 28, 28) and (s.std >= 0).all()


def test_only_the_prefix_runs(offline_model, tmp_path):
    def fail(*_):
        raise AssertionError("the classifier head must not run while estimating statistics")

    handle = offline_model.model._fc.register_forward_hook(fail)
    try:
        get_stats(offline_model, "block2_2", images=_folder(tmp_path), refresh=True)
    finally:
        handle.remove()


def test_cache_hit_and_corrupt_cache_recomputed(offline_model, tmp_path, monkeypatch):
    folder = _folder(tmp_path)
    first = get_stats(offline_model, "block1_1", images=folder)
    path = stats_cache_path("efficientnet_lite0", offline_model.weights_id, "block1_1",
                            f"folder:{folder.resolve()}:1000")
    assert path.is_file()
    calls = []
    real = stats_mod.compute_all_stats
    monkeypatch.setattr(stats_mod, "compute_all_stats", lambda *a, **k: calls.append(1) or real(*a, **k))
    again = get_stats(offline_model, "block1_1", images=folder)
    assert not calls and torch.equal(again.mean, first.mean) and again.n == first.n
    path.write_bytes(b"corrupt")
    recomputed = get_stats(offline_model, "block1_1", images=folder)
    assert calls == [1] and torch.allclose(recomputed.mean, first.mean)
    assert FeatureStats.load(path).n == 5  # rewritten


def test_sample_photo_source_with_progress(offline_model):
    seen = []
    s = get_stats(offline_model, "stem", n=40, progress=lambda done, total, label: seen.append((done, total)))
    assert s.n == 40 and "13 offline photos" in s.source and len(s.photos) == 13
    assert "40 crops of 13 photos" in s.describe() and s.includes("chelsea") and not s.includes("cat.jpg")
    assert seen[-1] == (40, 40)


def test_empty_folder_is_a_clear_error(offline_model, tmp_path):
    with pytest.raises(FileNotFoundError, match="No images"):
        get_stats(offline_model, "stem", images=tmp_path)


def test_save_load_roundtrip(tmp_path):
    s = FeatureStats(torch.rand(3, 2, 2), torch.rand(3, 2, 2), 12, "m", "w", "l", "src", 2)
    t = FeatureStats.load(s.save(tmp_path / "s.npz"))
    assert torch.equal(t.mean, s.mean) and (t.n, t.layer, t.skipped) == (12, "l", 2)


@pytest.mark.parametrize("layer", ["stem", "block3_2", "block6_4", "head"])
def test_shipped_statistics_seed_the_cache_for_every_layer(offline_model, monkeypatch, layer):
    """Every layer of the offline network ships 1000-crop statistics, so no first run needs an estimate."""
    monkeypatch.setattr(stats_mod, "compute_all_stats", lambda *a, **k: pytest.fail("should not estimate"))
    s = get_stats(offline_model, layer)
    assert s.n == 1000 and len(s.photos) == 13 and s.is_rough  # 13 distinct photos are few: rough, and said so
    assert "1000 crops of 13 photos" in s.describe() and "only 13 distinct photos" in s.describe()
    assert stats_cache_path(offline_model.key, offline_model.weights_id, layer,
                            stats_mod.stats_source_key(None, 1000)).is_file()


def test_shipped_statistics_cover_every_layer_and_stay_small():
    files = list(stats_mod.SHIPPED_STATS_DIR.glob("efficientnet_lite0__*.npz"))
    from iba_core.networks import get_spec

    assert {f.name.split("__")[2] for f in files} == set(get_spec("efficientnet_lite0").layers)
    assert sum(f.stat().st_size for f in files) <= 6 * 2**20


def test_one_pass_estimates_every_layer_and_matches_one_layer_alone(monkeypatch):
    """get_stats on a miss estimates all layers at once (cached), equal to estimating a layer alone."""
    from iba_core.networks import load_network

    net = load_network("resnet50", weights="random")
    calls = []
    real = stats_mod.compute_all_stats
    monkeypatch.setattr(stats_mod, "compute_all_stats", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    first = get_stats(net, "conv2_1", n=6)
    later = get_stats(net, "conv5_3", n=6)  # from the same pass: nothing estimated
    assert len(calls) == 1 and set(calls[0]) == set(net.spec.layers)
    alone = real(net, ["conv5_3"], n=6)["conv5_3"]
    torch.testing.assert_close(later.mean, alone.mean, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(later.std, alone.std, rtol=1e-4, atol=1e-5)
    assert first.mean.shape == (256, 56, 56) and later.active is not None
