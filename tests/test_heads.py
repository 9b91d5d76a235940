"""Classifier heads (softmax, sigmoid, binary): probabilities and the loss's prediction term against values worked
out by hand, and the Per-Sample Bottleneck on a tiny hand-built multi-label network."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import iba_core.per_sample as per_sample
from iba_core.errors import UserError
from iba_core.feature_stats import FeatureStats, estimate_stats
from iba_core.heads import check_fits, check_head, predicted, probabilities, target_nll
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck, target_note


def _sigma(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


# ---- probabilities and target_nll by hand -------------------------------------------------------------------


def test_sigmoid_probabilities_and_nll_are_per_label():
    z = torch.tensor([[2.0, -1.0, 0.0]])
    p = probabilities(z, "sigmoid")[0]
    assert p.tolist() == pytest.approx([_sigma(2.0), _sigma(-1.0), 0.5], rel=1e-6)
    assert float(p.sum()) == pytest.approx(_sigma(2.0) + _sigma(-1.0) + 0.5, rel=1e-6)  # need not sum to 1
    # −log σ(2) = log(1 + e^−2); the other labels' logits do not enter
    assert float(target_nll(z, torch.tensor([0]), "sigmoid")) == pytest.approx(math.log(1 + math.exp(-2.0)), rel=1e-6)
    assert float(target_nll(z, torch.tensor([1]), "sigmoid")) == pytest.approx(math.log(1 + math.exp(1.0)), rel=1e-6)
    assert float(target_nll(z, torch.tensor([2]), "sigmoid")) == pytest.approx(math.log(2.0), rel=1e-6)
    changed = z.clone()
    changed[0, 1:] = torch.tensor([40.0, -7.0])
    assert float(target_nll(changed, torch.tensor([0]), "sigmoid")) == pytest.approx(math.log(1 + math.exp(-2.0)),
                                                                                       rel=1e-6)


def test_sigmoid_nll_is_the_batch_mean_and_stable_for_large_logits():
    z = torch.tensor([[2.0, -1.0], [-3.0, 0.5], [-200.0, 0.0]])
    labels = torch.tensor([0, 1, 0])
    expected = (math.log(1 + math.exp(-2.0)) + math.log(1 + math.exp(-0.5)) + 200.0) / 3  # −log σ(−200) ≈ 200
    assert float(target_nll(z, labels, "sigmoid")) == pytest.approx(expected, rel=1e-5)


def test_softmax_is_unchanged():
    z = torch.tensor([[2.0, -1.0, 0.0], [0.3, 0.2, -4.0]])
    labels = torch.tensor([0, 2])
    assert torch.equal(probabilities(z, "softmax"), z.softmax(dim=1))
    assert torch.equal(target_nll(z, labels, "softmax"), F.cross_entropy(z, labels))
    e = [math.exp(v) for v in (2.0, -1.0, 0.0)]
    assert float(probabilities(z, "softmax")[0, 0]) == pytest.approx(e[0] / sum(e), rel=1e-6)
    assert predicted(z, "softmax").tolist() == [0, 0]


def test_binary_both_targets():
    z = torch.tensor([[1.5], [-0.5]])
    p = probabilities(z, "binary")
    assert p.shape == (2, 2)
    assert p[:, 1].tolist() == pytest.approx([_sigma(1.5), _sigma(-0.5)], rel=1e-6)
    assert p[:, 0].tolist() == pytest.approx([1 - _sigma(1.5), 1 - _sigma(-0.5)], rel=1e-6)
    assert p.sum(dim=1).tolist() == pytest.approx([1.0, 1.0], rel=1e-6)
    assert predicted(z, "binary").tolist() == [1, 0]
    # target 1: −log σ(z); target 0: −log σ(−z) = −log(1 − σ(z))
    one, zero = torch.tensor([1]), torch.tensor([0])
    assert float(target_nll(z[:1], one, "binary")) == pytest.approx(-math.log(_sigma(1.5)), rel=1e-6)
    assert float(target_nll(z[:1], zero, "binary")) == pytest.approx(-math.log(1 - _sigma(1.5)), rel=1e-6)
    assert float(target_nll(z, torch.tensor([1, 0]), "binary")) == pytest.approx(
        (-math.log(_sigma(1.5)) - math.log(1 - _sigma(-0.5))) / 2, rel=1e-6)
    # a binary head is the two-class softmax over logits (0, z)
    two = torch.cat([torch.zeros_like(z), z], dim=1)
    torch.testing.assert_close(probabilities(z, "binary"), two.softmax(dim=1), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(target_nll(z, torch.tensor([1, 0]), "binary"),
                               F.cross_entropy(two, torch.tensor([1, 0])), rtol=1e-6, atol=1e-7)


def test_unknown_heads_and_misfits_are_one_sentence():
    with pytest.raises(UserError, match=r"Unknown head 'tanh'; choose one of: softmax, sigmoid, binary, similarity\."):
        check_head("tanh")
    with pytest.raises(UserError, match="needs a class list of two names"):
        check_fits("binary", 1, 3, "Net")
    with pytest.raises(UserError, match="needs one output .* but the network has 2"):
        check_fits("binary", 2, 2, "Net")
    with pytest.raises(UserError, match="sigmoid head with 4 class names but 3 outputs"):
        check_fits("sigmoid", 3, 4, "Net")
    check_fits("binary", 1, 2, "Net")
    check_fits("sigmoid", 4, 4, "Net")
    with pytest.raises(UserError, match="Unknown head"):
        PerSampleBottleneck.from_split(nn.Identity(), nn.Identity(),
                                       FeatureStats(torch.zeros(2, 4, 4), torch.ones(2, 4, 4), 10), head="tanh")


def test_target_note_of_a_sigmoid_head():
    # p ≥ 50 %: the label is recognised, top-1 or not
    assert target_note(0.6, 0.6, is_top1=False, head="sigmoid") == ""
    assert target_note(0.5, 0.5, is_top1=False, head="sigmoid") == ""
    # a softmax runner-up at 60 % is named as not the top prediction
    assert "not the network's top prediction" in target_note(0.6, 0.6, is_top1=False)
    # p < 50 %: not seen, whether or not it is the top-1 (30 % is no warning for softmax)
    note = target_note(0.3, 0.3, is_top1=True, head="sigmoid")
    assert "does not see this label" in note and "30.0 %" in note and "independent" in note
    assert target_note(0.3, 0.3, is_top1=True) == ""
    assert "speaks against this label" in target_note(0.2, 0.7, is_top1=False, head="sigmoid")


# ---- the Per-Sample Bottleneck with a sigmoid head ----------------------------------------------------------


class TwoConvNet(nn.Module):
    """conv → ReLU → conv (the bottleneck layer) → ReLU → pool → linear with `outputs` outputs."""

    def __init__(self, outputs: int = 3):
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4, outputs)

    def prefix(self) -> nn.Module:
        return nn.Sequential(self.conv1, nn.ReLU(), self.conv2)

    def suffix(self) -> nn.Module:
        return nn.Sequential(nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), self.fc)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.suffix()(self.prefix()(x))


class Recording(nn.Module):
    """A suffix that keeps the logits of its last call."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner, self.last = inner, None

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        out = self.inner(z)
        self.last = out.detach().clone()
        return out


def _stats(net: TwoConvNet) -> FeatureStats:
    g = torch.Generator().manual_seed(1)
    mean, std, n = estimate_stats(net.prefix(), [torch.randn(16, 3, 8, 8, generator=g) for _ in range(4)])
    return FeatureStats(mean, std, n, "two-conv", "random", "conv2", "random noise")


def _image() -> torch.Tensor:
    return torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))


@pytest.fixture
def net() -> TwoConvNet:
    return TwoConvNet(3).eval()


def test_per_sample_with_a_sigmoid_head_minimises_minus_log_sigma(net, monkeypatch):
    calls = []

    def recording_nll(logits, labels, head):
        value = target_nll(logits, labels, head)
        calls.append((logits.detach().clone(), labels.clone(), head, float(value.detach())))
        return value

    monkeypatch.setattr(per_sample, "target_nll", recording_nll)
    suffix = Recording(net.suffix())
    settings = BottleneckSettings(steps=3, batch=4, precision="fp32")
    iba = PerSampleBottleneck.from_split(net.prefix(), suffix, _stats(net), settings, head="sigmoid")
    x, target = _image(), 1
    result = iba.attribute(x, target=target)
    p_with_logits = suffix.last  # the fresh noisy batch of the result

    assert len(calls) == 3 and all(head == "sigmoid" for _, _, head, _ in calls)
    for (logits, labels, _, value), step in zip(calls, result.history):
        assert logits.shape == (4, 3) and labels.tolist() == [target] * 4
        by_hand = float(-torch.log(torch.sigmoid(logits[:, target])).mean())  # −log σ(z_t), nothing else
        assert value == pytest.approx(by_hand, rel=1e-4)
        assert step.ce == pytest.approx(by_hand, rel=1e-4)
        assert step.p_target == pytest.approx(float(torch.sigmoid(logits[:, target]).mean()), rel=1e-4)
    with torch.no_grad():
        clean = net(x)[0]
    assert result.head == "sigmoid" and result.summary()["head"] == "sigmoid"
    assert result.p_without == pytest.approx(float(torch.sigmoid(clean[target])), rel=1e-4)
    assert result.p_with == pytest.approx(float(torch.sigmoid(p_with_logits[:, target]).mean()), rel=1e-4)
    assert result.predicted == int(clean.argmax())
    assert result.p_predicted == pytest.approx(float(torch.sigmoid(clean.max())), rel=1e-4)
    assert result.total_bits > 0 and torch.isfinite(torch.as_tensor(result.heatmap)).all()


def test_sigmoid_and_softmax_heads_give_different_losses_on_the_same_network(net):
    settings = BottleneckSettings(steps=2, batch=4, precision="fp32")
    stats = _stats(net)
    soft = PerSampleBottleneck.from_split(net.prefix(), net.suffix(), stats, settings).attribute(_image(), 0)
    sig = PerSampleBottleneck.from_split(net.prefix(), net.suffix(), stats, settings, head="sigmoid").attribute(
        _image(), 0)
    with torch.no_grad():
        clean = net(_image())[0]
    assert soft.head == "softmax" and soft.p_without == pytest.approx(float(clean.softmax(0)[0]), rel=1e-4)
    assert sig.p_without == pytest.approx(float(torch.sigmoid(clean[0])), rel=1e-4)
    assert soft.history[0].ce != pytest.approx(sig.history[0].ce, rel=1e-3)


def test_per_sample_with_a_binary_head_explains_both_classes():
    net = TwoConvNet(1).eval()
    stats = _stats(net)
    settings = BottleneckSettings(steps=2, batch=4, precision="fp32")
    with torch.no_grad():
        z = float(net(_image())[0, 0])
    for target, p in ((1, _sigma(z)), (0, 1 - _sigma(z))):
        result = PerSampleBottleneck.from_split(net.prefix(), net.suffix(), stats, settings, head="binary").attribute(
            _image(), target)
        assert result.target == target and result.p_without == pytest.approx(p, rel=1e-4)
        assert 0 < result.p_with < 1 and result.total_bits > 0
    default = PerSampleBottleneck.from_split(net.prefix(), net.suffix(), stats, settings, head="binary").attribute(
        _image())
    assert default.target == int(z > 0)  # the top-1 of [1 − σ(z), σ(z)]


# ---- logit-based methods and metrics on a binary head ---------------------------------------------------------


def test_logit_methods_explain_each_binary_class_by_its_log_odds():
    from types import SimpleNamespace

    from iba_core.methods import get_method
    from iba_core.metrics.sensitivity_n import logit_drops

    model = TwoConvNet(1).eval()
    network = SimpleNamespace(model=model, spec=SimpleNamespace(head="binary"), categories=["negative", "positive"],
                              device=torch.device("cpu"))
    x = _image()
    gradient = get_method("gradient")
    positive = gradient.attribute(network, x, 1).values
    negative = gradient.attribute(network, x, 0).values
    assert float(abs(positive).max()) > 0
    torch.testing.assert_close(torch.as_tensor(negative), -torch.as_tensor(positive), rtol=1e-5, atol=1e-7)
    assert not model._forward_hooks  # the two-logit view is gone after the call
    with torch.no_grad():
        assert model(x).shape == (1, 1)
    up = logit_drops(model, x, 1, tile=4, sets=3, n_count=2, head="binary").drops
    down = logit_drops(model, x, 0, tile=4, sets=3, n_count=2, head="binary").drops
    np_up, np_down = torch.as_tensor(up), torch.as_tensor(down)
    torch.testing.assert_close(np_down, -np_up, rtol=1e-6, atol=1e-9)


def test_degradation_measures_sigmoid_probabilities():
    from iba_core.metrics.degradation import degradation_curves

    model = TwoConvNet(3).eval()
    x = _image()
    values = torch.rand(8, 8, generator=torch.Generator().manual_seed(2)).numpy()
    curves = degradation_curves(model, x, values, 2, tile=4, head="sigmoid")
    with torch.no_grad():
        clean = torch.sigmoid(model(x)[0].double())
    assert curves.morf[0] == pytest.approx(float(clean[2]), rel=1e-6)
    assert curves.top1 == pytest.approx(float(clean.max()), rel=1e-6)
    softmax = degradation_curves(model, x, values, 2, tile=4)
    with torch.no_grad():
        p_softmax = float(model(x)[0].double().softmax(0)[2])
    assert softmax.morf[0] == pytest.approx(p_softmax, rel=1e-6)
