"""PerSampleBottleneck on a tiny hand-built network and on the real offline model."""
import numpy as np
import pytest
import torch

from reference_impl import hook_count
from iba_core.errors import UserError
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck


def _x(seed=0, size=8):
    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(seed))


def _split(net, stats, **kw):
    # fp32: these tests compare numbers across paths and batchings ("auto" may pick bf16 per path)
    return PerSampleBottleneck.from_split(net.prefix(), net.suffix(), stats,
                                          BottleneckSettings(**{"precision": "fp32", **kw}))


def _snapshot(net):
    return (
        [m.training for m in net.modules()],
        [p.requires_grad for p in net.parameters()],
        [None if p.grad is None else p.grad.clone() for p in net.parameters()],
        {k: v.clone() for k, v in net.state_dict().items()},
    )


def _assert_same(before, after):
    assert before[0] == after[0] and before[1] == after[1]
    for a, b in zip(before[2], after[2]):
        assert (a is None and b is None) or torch.equal(a, b)
    for k in before[3]:
        assert torch.equal(before[3][k], after[3][k]), k


def test_result_shapes_units_and_history(tiny_net, tiny_stats):
    steps = []
    res = _split(tiny_net, tiny_stats).attribute(_x(), target=2, callback=steps.append)
    assert res.heatmap.shape == (8, 8) and res.feature_bits.shape == (8, 8)
    assert res.heatmap.sum() == pytest.approx(res.total_bits, rel=1e-4)
    assert res.total_bits > 0 and res.target == 2
    assert 0 <= res.p_without <= 1 and 0 <= res.p_with <= 1
    assert [s.step for s in steps] == list(range(1, 11)) and res.history == steps
    first = steps[0]
    assert first.lambda_mean.shape == (8, 8) and first.bits_per_pixel.shape == (8, 8)
    assert first.lambda_mean.min() > 0.95  # α = 5 start: almost everything passes
    assert first.beta_info == pytest.approx(10.0 / (4 * 8 * 8) * first.info, rel=1e-5)


def test_information_falls_during_optimisation(tiny_net, tiny_stats):
    res = _split(tiny_net, tiny_stats, beta_k=100).attribute(_x(), target=1)
    infos = [h.info for h in res.history]
    assert infos[-1] < 0.5 * infos[0]


def test_default_target_is_top1(tiny_net, tiny_stats):
    with torch.no_grad():
        top = int(tiny_net(_x()).argmax())
    assert _split(tiny_net, tiny_stats, steps=1).attribute(_x()).target == top


def test_seeded_runs_are_reproducible_and_seeds_matter(tiny_net, tiny_stats):
    a = _split(tiny_net, tiny_stats, seed=7).attribute(_x(), target=0)
    b = _split(tiny_net, tiny_stats, seed=7).attribute(_x(), target=0)
    c = _split(tiny_net, tiny_stats, seed=8).attribute(_x(), target=0)
    assert np.array_equal(a.heatmap, b.heatmap)
    assert not np.array_equal(a.heatmap, c.heatmap)


def test_split_path_equals_hook_path_tiny(tiny_net, tiny_stats):
    settings = BottleneckSettings(seed=3, precision="fp32")
    split = PerSampleBottleneck.from_split(tiny_net.prefix(), tiny_net.suffix(), tiny_stats, settings)
    hook = PerSampleBottleneck(tiny_net, "conv2", tiny_stats, settings)
    a, b = split.attribute(_x(), target=4), hook.attribute(_x(), target=4)
    np.testing.assert_allclose(a.heatmap, b.heatmap, rtol=1e-4, atol=1e-6)
    assert a.p_with == pytest.approx(b.p_with, rel=1e-5)


class _ViewNet(torch.nn.Module):
    """An old-style network that flattens with `.view`, which needs plainly contiguous input."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        h = self.conv(x)
        return self.fc(h.view(h.shape[0], -1))


def test_hook_path_works_when_the_network_views_the_layer_output():
    from iba_core.feature_stats import FeatureStats

    net = _ViewNet().eval()
    stats = FeatureStats(torch.zeros(4, 8, 8), torch.ones(4, 8, 8), 1000)
    res = PerSampleBottleneck(net, "conv", stats, BottleneckSettings(steps=2)).attribute(_x(), target=1)
    assert res.heatmap.shape == (8, 8) and np.isfinite(res.heatmap).all()


def test_hook_path_refuses_a_module_that_runs_twice():
    from iba_core.feature_stats import FeatureStats

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.act = torch.nn.Conv2d(3, 3, 1), torch.nn.ReLU()
            self.fc = torch.nn.Linear(3, 2)

        def forward(self, x):
            return self.fc(self.act(self.conv(self.act(x))).mean(dim=(2, 3)))

    net = Twice().eval()
    stats = FeatureStats(torch.zeros(3, 8, 8), torch.ones(3, 8, 8), 1000)
    with pytest.raises(UserError, match="runs 2 times"):
        PerSampleBottleneck(net, "act", stats).attribute(_x(), target=0)
    assert hook_count(net) == 0


def test_split_path_equals_hook_path_on_offline_model(offline_model, offline_stats, chelsea_x):
    layer = offline_model.spec.default_layer
    settings = BottleneckSettings(seed=0, steps=3, precision="fp32")
    split = PerSampleBottleneck.for_network(offline_model, layer, offline_stats, settings).attribute(chelsea_x, 285)
    hook = PerSampleBottleneck(offline_model.model, offline_model.hook_module(layer), offline_stats, settings)
    other = hook.attribute(chelsea_x, 285)
    np.testing.assert_allclose(split.heatmap, other.heatmap, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("path", ["split", "hook"])
def test_model_state_restored_after_success(tiny_net, tiny_stats, path):
    tiny_net.train()  # a user's model in train mode with gradients on and a stale .grad
    tiny_net.fc.weight.grad = torch.ones_like(tiny_net.fc.weight)
    tiny_net.conv1.weight.requires_grad_(False)
    before = _snapshot(tiny_net)
    iba = _split(tiny_net, tiny_stats) if path == "split" else PerSampleBottleneck(tiny_net, "conv2", tiny_stats)
    iba.attribute(_x(), target=0)
    _assert_same(before, _snapshot(tiny_net))
    assert hook_count(tiny_net) == 0


class _Boom(Exception):
    pass


@pytest.mark.parametrize("path", ["split", "hook"])
def test_model_state_restored_after_exception(tiny_net, tiny_stats, path):
    tiny_net.train()
    before = _snapshot(tiny_net)
    iba = _split(tiny_net, tiny_stats) if path == "split" else PerSampleBottleneck(tiny_net, "conv2", tiny_stats)

    def fail_at_step_3(info):
        if info.step == 3:
            raise _Boom

    with pytest.raises(_Boom):
        iba.attribute(_x(), target=0, callback=fail_at_step_3)
    _assert_same(before, _snapshot(tiny_net))
    assert hook_count(tiny_net) == 0


def test_hook_removed_when_forward_raises(tiny_net, tiny_stats):
    calls = {"n": 0}

    def explode(_m, _i, _o):
        calls["n"] += 1
        if calls["n"] == 3:
            raise _Boom

    handle = tiny_net.fc.register_forward_hook(explode)
    try:
        with pytest.raises(_Boom):
            PerSampleBottleneck(tiny_net, "conv2", tiny_stats).attribute(_x(), target=0)
        assert hook_count(tiny_net) == 1  # only the test's own hook remains
    finally:
        handle.remove()


@pytest.mark.parametrize("beta_k", [1e-3, 1e-1, 10.0, 1e3, 1e4])
def test_no_nan_over_the_beta_range(tiny_net, tiny_stats, beta_k):
    res = _split(tiny_net, tiny_stats, beta_k=beta_k, steps=40).attribute(_x(), target=3)
    assert np.isfinite(res.heatmap).all() and np.isfinite(res.total_bits)
    assert all(np.isfinite([h.ce, h.info, h.p_target]).all() for h in res.history)
    assert (res.heatmap >= 0).all()


def test_more_beta_means_fewer_bits(tiny_net, tiny_stats):
    low = _split(tiny_net, tiny_stats, beta_k=0.1).attribute(_x(), target=3)
    high = _split(tiny_net, tiny_stats, beta_k=1000).attribute(_x(), target=3)
    assert high.total_bits < low.total_bits


@pytest.mark.parametrize("precision", ["fp32", "auto"])
def test_stats_shape_mismatch_is_a_clear_error(tiny_net, tiny_stats, precision):
    """Also with "auto", whose timing pass would otherwise fail first inside a convolution."""
    from iba_core.feature_stats import FeatureStats

    wrong = FeatureStats(torch.zeros(2, 8, 8), torch.ones(2, 8, 8), 10)
    with pytest.raises(UserError, match="Statistics are for a layer shaped"):
        _split(tiny_net, wrong, precision=precision).attribute(_x(), target=0)


@pytest.mark.parametrize("bad", [dict(lr=0), dict(batch=0), dict(beta_k=-1), dict(sigma=-1)])
def test_bad_settings_are_refused(bad):
    with pytest.raises(UserError):
        BottleneckSettings(**bad).validate()


def test_read_point_last_step_is_the_last_forward_pass(tiny_net, tiny_stats):
    """The authors' read point: the KL of the 10th forward pass, before the 10th update."""
    final = _split(tiny_net, tiny_stats, steps=5).attribute(_x(), target=3)
    authors = _split(tiny_net, tiny_stats, steps=5, read_point="last_step").attribute(_x(), target=3)
    np.testing.assert_allclose(authors.heatmap, authors.history[-1].bits_per_pixel, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(authors.lambda_mean, authors.history[-1].lambda_mean)
    assert not np.allclose(final.heatmap, authors.heatmap)
    assert final.p_with == authors.p_with  # p(target) with the bottleneck always uses the final λ
    with pytest.raises(UserError, match="read point"):
        BottleneckSettings(read_point="middle").validate()


def _assert_last_step_is_the_result(res):
    """The last step (what the live view, the replay and the GIF end on) is the result: same map, λ and bits."""
    from iba_core.render.animation import step_bits

    last = res.history[-1]
    np.testing.assert_allclose(last.bits_per_pixel, res.heatmap, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(last.lambda_mean, res.lambda_mean, rtol=1e-4, atol=1e-7)
    assert last.unlocated_bits == pytest.approx(res.unlocated_bits, rel=1e-4, abs=1e-6)
    assert step_bits(last) == pytest.approx(res.total_bits, rel=1e-4)


@pytest.mark.parametrize("read_point", ["final", "last_step"])
def test_history_ends_on_the_final_map(tiny_net, tiny_stats, read_point):
    """One run, one total: history[-1] is the heatmap, for a single image with a live callback and for a batch
    read back after the last step."""
    iba = _split(tiny_net, tiny_stats, steps=3, batch=2, read_point=read_point)
    live = []
    single = iba.attribute(_x(), target=2, callback=live.append)
    assert live == single.history and len(live) == 3
    batch = iba.attribute_batch(torch.cat([_x(0), _x(1)]), [2, 1])
    for res in (single, *batch):
        _assert_last_step_is_the_result(res)
    np.testing.assert_allclose(batch[0].history[-1].bits_per_pixel, single.heatmap, rtol=1e-4, atol=1e-7)
    # The steps' losses and p(target) are those of their forward passes: the same under both read points.
    other = _split(tiny_net, tiny_stats, steps=3, batch=2,
                   read_point="last_step" if read_point == "final" else "final").attribute(_x(), target=2)
    assert [h.ce for h in other.history] == [h.ce for h in single.history]
    assert [h.p_target for h in other.history] == [h.p_target for h in single.history]
    if read_point == "final":  # maps after each update: step t shows what step t + 1's forward pass starts from
        np.testing.assert_allclose(single.history[0].lambda_mean, other.history[1].lambda_mean, rtol=1e-5)


def _tiny_vit_network():
    """The tiny ViT of tests/networks (a class token that mixes every patch), with statistics of its block."""
    import importlib.util
    from pathlib import Path

    from iba_core.feature_stats import FeatureStats, estimate_stats
    from iba_core.networks import network_from_module

    spec = importlib.util.spec_from_file_location(
        "tiny_transformer", Path(__file__).parent / "networks" / "tiny_transformer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    net = network_from_module(module.TinyViT(True), "tiny-vit-history")
    layer = net.spec.default_layer
    mean, std, n = estimate_stats(net.prefix(layer), [torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(1))])
    return net, layer, FeatureStats(mean, std, n)


@pytest.mark.parametrize("read_point", ["final", "last_step"])
def test_history_ends_on_the_final_map_at_a_token_layer(read_point):
    """A class token's bits have no place on the map: the last step carries them as the result does."""
    net, layer, stats = _tiny_vit_network()
    settings = BottleneckSettings(steps=3, batch=2, precision="fp32", read_point=read_point)
    iba = PerSampleBottleneck.for_network(net, layer, stats, settings)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    single = iba.attribute(x[:1], 1, callback=lambda info: None)
    for res in (single, *iba.attribute_batch(x, [1, 0])):
        assert res.unlocated_bits > 0
        _assert_last_step_is_the_result(res)


class DeadAfterReLU(torch.nn.Module):
    """conv → ReLU (the bottleneck layer: channel 0 is dead, its bias far below any input) → pool → linear."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 3, 3, padding=1)
        with torch.no_grad():
            self.conv.bias[0] = -1e3
        self.relu = torch.nn.ReLU()
        self.fc = torch.nn.Linear(3, 4)

    def prefix(self):
        return torch.nn.Sequential(self.conv, self.relu)

    def suffix(self):
        return torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), self.fc)


def test_inactive_units_are_masked_in_z_and_in_the_kl():
    from iba_core.feature_stats import FeatureStats, estimate_moments

    net = DeadAfterReLU().eval()
    g = torch.Generator().manual_seed(2)
    moments, _ = estimate_moments(lambda x: {"relu": net.prefix()(x)}, [torch.randn(32, 3, 8, 8, generator=g)])
    mean, std, n, active = moments["relu"].summary()
    assert torch.all(active[0] == 0) and torch.all(active[1:] > 0.05)  # the dead channel is never non-zero
    stats = FeatureStats(mean, std, n, "dead", "random", "relu", "noise", active=active)
    run = lambda **kw: PerSampleBottleneck.from_split(  # noqa: E731
        net.prefix(), net.suffix(), stats, BottleneckSettings(steps=3, precision="fp32", **kw)).attribute(_x(), target=1)
    plain, masked = run(), run(inactive_threshold=0.01)
    # Unmasked, the dead channel still counts −log(1−λ) nats per element while carrying nothing.
    dead_bits = plain.total_bits - masked.total_bits
    assert dead_bits > 0 and np.isfinite(masked.heatmap).all()
    without = FeatureStats(mean, std, n, "dead", "random", "relu", "noise")
    with pytest.raises(UserError, match="active"):
        PerSampleBottleneck.from_split(net.prefix(), net.suffix(), without,
                                       BottleneckSettings(inactive_threshold=0.01)).attribute(_x(), target=1)


def test_statistics_keep_the_activity_on_disk(tmp_path):
    from iba_core.feature_stats import FeatureStats

    stats = FeatureStats(torch.zeros(2, 3, 3), torch.ones(2, 3, 3), 10, active=torch.full((2, 3, 3), 0.5))
    back = FeatureStats.load(stats.save(tmp_path / "s.npz"))
    assert torch.equal(back.active, stats.active)
    assert FeatureStats.load(FeatureStats(torch.zeros(1), torch.ones(1), 3).save(tmp_path / "t.npz")).active is None


def test_batched_attribution_equals_one_image_at_a_time(tiny_net, tiny_stats):
    xs = torch.cat([_x(seed) for seed in range(3)])
    targets = [0, 3, None]
    together = _split(tiny_net, tiny_stats, seed=5).attribute_batch(xs, targets)
    for i, res in enumerate(together):
        alone = _split(tiny_net, tiny_stats, seed=5).attribute(xs[i : i + 1], target=targets[i])
        assert res.target == alone.target
        np.testing.assert_allclose(res.heatmap, alone.heatmap, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(res.p_with, alone.p_with, rtol=1e-4)
        assert [h.image for h in res.history] == [i] * len(alone.history)
    assert not np.allclose(together[0].heatmap, together[1].heatmap)


def test_batched_attribution_on_the_offline_network(offline_model, offline_stats, chelsea_x):
    from iba_core.images import load_sample

    coffee = offline_model.preprocess(load_sample("coffee"))
    iba = PerSampleBottleneck.for_network(offline_model, offline_model.spec.default_layer, offline_stats,
                                          BottleneckSettings(steps=4, precision="fp32"))
    both = iba.attribute_batch(torch.cat([chelsea_x, coffee]))
    for res, x in zip(both, (chelsea_x, coffee)):
        alone = iba.attribute(x)
        assert res.target == alone.target
        assert np.corrcoef(res.heatmap.ravel(), alone.heatmap.ravel())[0, 1] > 0.999
        assert res.total_bits == pytest.approx(alone.total_bits, rel=5e-3)
    assert [r.target for r in both] == [285, 967]


def test_lost_class_rule():
    from iba_core.per_sample import bottleneck_lost_class

    assert bottleneck_lost_class(0.6, 0.005)  # under 1 %
    assert bottleneck_lost_class(0.9, 0.05)  # under a tenth of p without the bottleneck
    assert not bottleneck_lost_class(0.3, 0.2) and not bottleneck_lost_class(0.05, 0.02)


def test_beta_1000_loses_the_class_on_the_offline_network(offline_model, offline_stats, chelsea_x):
    """Paper §4.1: β ≥ 1000/k discards all information; the result says so."""
    layer = offline_model.spec.default_layer
    run = lambda beta_k: PerSampleBottleneck.for_network(  # noqa: E731
        offline_model, layer, offline_stats, BottleneckSettings(beta_k=beta_k, precision="fp32")).attribute(chelsea_x, 285)
    lost, kept = run(1000.0), run(10.0)
    assert lost.lost_class and lost.summary()["bottleneck_lost_class"] is True
    assert not kept.lost_class


def test_result_says_which_path_ran_and_cnn_maps_have_no_unlocated_bits(tiny_net, tiny_stats):
    """A CNN layer's bits all lie on the image: the heatmap sums to the total; `path` names the way the net ran."""
    settings = BottleneckSettings(steps=2, precision="fp32")
    split = _split(tiny_net, tiny_stats, steps=2).attribute(_x(), target=1)
    hook = PerSampleBottleneck(tiny_net, "conv2", tiny_stats, settings).attribute(_x(), target=1)
    assert (split.path, hook.path) == ("split", "hook")
    for res in (split, hook):
        assert res.unlocated_bits == 0.0 and res.heatmap.sum() == pytest.approx(res.total_bits, rel=1e-5)
        assert res.summary()["path"] == res.path and res.summary()["unlocated_bits"] == 0.0
    np.testing.assert_allclose(split.heatmap, hook.heatmap, rtol=1e-4, atol=1e-7)


def test_target_note_speaks_only_for_classes_the_network_hardly_predicts() -> None:
    from iba_core.per_sample import LOW_P_TARGET, target_note

    assert target_note(0.36, 0.9, is_top1=True) == ""
    low = target_note(LOW_P_TARGET / 3, 0.5, is_top1=True)
    assert "does not recognise" in low and "rises" in low  # p rose: say why
    assert "rises" not in target_note(0.05, 0.01, is_top1=True)
    assert "not the network's top prediction" in target_note(0.3, 0.2, is_top1=False)


def test_result_knows_the_prediction_and_warns_on_an_unknown_image(offline_model, offline_stats) -> None:
    from iba_core.images import load_sample
    from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck

    x = offline_model.preprocess(load_sample("astronaut"))  # the network's top-1 is "ping-pong ball", p ≈ 0.03
    iba = PerSampleBottleneck.for_network(offline_model, offline_model.spec.default_layer, offline_stats,
                                         BottleneckSettings(steps=2, batch=2))
    result = iba.attribute(x)
    top, _, p_top = offline_model.top_k(x, 1)[0]
    assert (result.predicted, result.target) == (top, top)
    assert abs(result.p_predicted - p_top) <= 1e-4 + 1e-3 * p_top
    assert result.target_note and result.summary()["target_note"] == result.target_note


def test_target_note_names_a_runner_up_without_calling_it_unrecognised_and_ignores_small_rises() -> None:
    from iba_core.per_sample import target_note

    runner_up = target_note(0.28, 0.30, is_top1=False)  # chelsea's "tabby"
    assert "not the network's top prediction" in runner_up and "does not recognise" not in runner_up
    assert "rises" not in target_note(0.035, 0.038, is_top1=True)  # noise of the fresh batch, not a rise
    assert "rises to 20.0 %" in target_note(0.035, 0.20, is_top1=True)
