"""FeatureStats: stable accumulation, sources, cache, corrupt files."""
import numpy as np
import pytest
import torch
from PIL import Image

from iba_core import feature_stats as stats_mod
from iba_core.feature_stats import FeatureStats, RunningMoments, get_stats, stats_cache_path


def test_running_moments_match_numpy_even_with_a_large_offset():
    rng = np.random.default_rng(0)
    data = 1e6 + rng.normal(size=(1000, 3, 2, 2)).astype(np.float32) * 0.01
    moments = RunningMoments()
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


def test_a_folder_with_fewer_images_than_asked_for_says_how_many_were_used(offline_model, tmp_path):
    """200 samples asked of a folder of 5 readable images: all 5 are used, `n` says 5, and the note says that 200
    were asked for (a note, not an error: the statistics are usable, only rougher)."""
    folder = _folder(tmp_path)
    s = get_stats(offline_model, "block3_2", images=folder, n=200)
    assert s.n == 5 and s.requested == 200
    assert "200 samples were asked for, but the folder gave only 5 usable images" in s.describe()
    reloaded = get_stats(offline_model, "block3_2", images=folder, n=200)  # from the cache
    assert reloaded.n == 5 and reloaded.shortfall == s.shortfall


def test_no_shortfall_note_when_the_samples_asked_for_were_used():
    crops = FeatureStats(torch.zeros(1), torch.ones(1), 1000, photos=("a",) * 13, source_key="offline-photos-13:1000")
    assert crops.requested == 1000 and crops.shortfall is None and "asked for" not in crops.describe()
    assert FeatureStats(torch.zeros(1), torch.ones(1), 7).requested is None  # made by hand: nothing recorded


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
    with pytest.warns(UserWarning, match="unusable"):
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
    assert sum(f.stat().st_size for f in files) <= 4 * 2**20
    for f in files:  # the new layout: a checksum and the identity of what made them (scripts/convert_shipped_stats.py)
        assert FeatureStats.load(f).source_key == "offline-photos-13:1000"


def test_only_the_asked_layer_is_estimated_and_all_layers_match_one_pass(monkeypatch):
    """get_stats on a miss estimates that layer alone (the network runs only up to it); get_all_stats
    estimates every layer in one pass and agrees with a layer estimated alone."""
    from iba_core.networks import load_network

    net = load_network("resnet50", weights="random")
    calls = []
    real = stats_mod.compute_all_stats
    monkeypatch.setattr(stats_mod, "compute_all_stats", lambda *a, **k: calls.append(list(a[1])) or real(*a, **k))
    first = get_stats(net, "conv2_1", n=6)
    assert calls == [["conv2_1"]] and first.mean.shape == (256, 56, 56)
    later = get_stats(net, "conv5_3", n=6)
    assert calls[-1] == ["conv5_3"] and later.active is not None
    every = stats_mod.get_all_stats(net, n=6)  # the cached two are reused, the rest in one pass
    assert set(calls[-1]) == set(net.spec.layers) - {"conv2_1", "conv5_3"} and set(every) == set(net.spec.layers)
    alone = real(net, ["conv4_1"], n=6)["conv4_1"]
    torch.testing.assert_close(every["conv4_1"].mean, alone.mean, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(every["conv4_1"].std, alone.std, rtol=1e-4, atol=1e-5)


# ---- bounded estimation: only the layer asked for, one batch at a time, cancellable -------------------


@pytest.fixture
def tiny_network(tiny_net, tmp_path, monkeypatch):
    """TinyNet as a Network (a derived spec, run through forward hooks), with a private cache."""
    from iba_core.networks import network_from_module

    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path / "cache"))
    return network_from_module(tiny_net, "tiny")


def _count_calls(module, calls: list, name: str):
    return module.register_forward_hook(lambda *_: calls.append(name))


def test_a_hooked_network_runs_only_up_to_the_layer_asked_for(tiny_network):
    model, calls = tiny_network.model, []
    handles = [_count_calls(m, calls, n) for n, m in (("conv1", model.conv1), ("conv2", model.conv2),
                                                       ("fc", model.fc))]
    try:
        stats = get_stats(tiny_network, "conv1", n=20)  # 20 crops in batches of 32: one batch
    finally:
        for h in handles:
            h.remove()
    assert calls == ["conv1"]  # conv2 and the classifier never ran
    assert stats.mean.shape == (4, 224, 224) and stats.n == 20


def test_the_estimator_holds_one_batch_at_a_time(tiny_net):
    """However many batches, the estimator keeps running sums only: every earlier batch is gone (garbage)
    by the time the next one is drawn."""
    import gc
    import weakref

    alive: list = []

    def batches():
        g = torch.Generator().manual_seed(0)
        for _ in range(6):
            gc.collect()
            assert all(ref() is None for ref in alive), "an earlier batch is still held"
            x = torch.randn(4, 3, 8, 8, generator=g)
            alive.append(weakref.ref(x))
            yield x
            del x

    moments, seen = stats_mod.estimate_moments(lambda x: {"conv2": tiny_net.prefix()(x)}, batches())
    assert seen == 24 and moments["conv2"].n == 24 and len(alive) == 6


def test_cancelling_keeps_nothing(tiny_network):
    def stop(done, total, label):
        return False  # the stop signal

    with pytest.raises(stats_mod.EstimationCancelled, match="nothing was kept"):
        get_stats(tiny_network, "conv1", n=40, progress=stop)

    class Stop(Exception):
        pass

    def interrupt(done, total, label):
        raise Stop

    with pytest.raises(Stop):
        get_stats(tiny_network, "conv1", n=40, progress=interrupt)
    folder = stats_mod.cache_dir() / "stats"
    assert not folder.exists() or not list(folder.iterdir())
    seen = []
    get_stats(tiny_network, "conv1", n=40, progress=lambda d, t, _l: seen.append((d, t)))
    assert seen == [(32, 40), (40, 40)] and len(list(folder.glob("*.npz"))) == 1  # (done, total): an ETA


def test_default_samples_are_few_only_without_folder_or_shipped_statistics(tiny_network, offline_model, tmp_path,
                                                                           monkeypatch):
    assert stats_mod.default_samples(tiny_network) == stats_mod.PHOTO_SAMPLES < stats_mod.RECOMMENDED_SAMPLES
    assert stats_mod.default_samples(tiny_network, tmp_path) == stats_mod.RECOMMENDED_SAMPLES
    assert stats_mod.default_samples(offline_model) == stats_mod.RECOMMENDED_SAMPLES  # shipped: free, and the same
    monkeypatch.setenv("IBA_STATS_SAMPLES", "64")
    assert stats_mod.app_samples(tiny_network) == stats_mod.app_samples(offline_model) == 64
    monkeypatch.delenv("IBA_STATS_SAMPLES")
    assert stats_mod.app_samples(tiny_network) == stats_mod.PHOTO_SAMPLES


def test_few_crops_say_how_to_get_more():
    few = FeatureStats(torch.zeros(1), torch.ones(1), 200, photos=("a", "b"), source="crops")
    text = few.describe()
    assert "fewer than 1000 samples" in text and "IBA_STATS_SAMPLES=1000" in text and "--n" in text


# ---- validation: statistics that load but are wrong are rebuilt ---------------------------------------


def test_problem_names_what_is_wrong():
    ok = FeatureStats(torch.zeros(2, 2), torch.ones(2, 2), 5, active=torch.full((2, 2), 0.5))
    assert ok.problem() is None
    dead_channel = FeatureStats(torch.zeros(2, 2), torch.tensor([[0.0, 0.0], [1.0, 1.0]]), 5,
                                active=torch.tensor([[0.0, 0.0], [1.0, 1.0]]))
    assert dead_channel.problem() is None  # σ = 0 where a unit is never active is fine (dead ReLU units)
    zeroed = FeatureStats(torch.zeros(2, 2), torch.zeros(2, 2), 5, active=torch.full((2, 2), 0.5))
    assert "σ is zero" in zeroed.problem()
    assert "not finite" in FeatureStats(torch.full((2,), float("nan")), torch.ones(2), 5).problem()
    assert "negative" in FeatureStats(torch.zeros(2), -torch.ones(2), 5).problem()
    assert "shape" in FeatureStats(torch.zeros(2), torch.ones(3), 5).problem()
    assert "no samples" in FeatureStats(torch.zeros(2), torch.ones(2), 0).problem()


def test_implausible_fresh_statistics_are_used_but_not_kept(tiny_network, monkeypatch):
    real = stats_mod.compute_all_stats

    def zeroed(*a, **k):
        out = real(*a, **k)
        for s in out.values():
            s.std.zero_()
        return out

    monkeypatch.setattr(stats_mod, "compute_all_stats", zeroed)
    with pytest.warns(UserWarning, match="look wrong"):
        stats = get_stats(tiny_network, "conv1", n=8)
    assert stats.n == 8 and not list((stats_mod.cache_dir() / "stats").glob("*.npz"))
