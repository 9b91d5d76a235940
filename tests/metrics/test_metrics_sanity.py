import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from iba_core.metrics.sanity import (
    cascading_randomisation,
    format_table,
    heatmap_ssim,
    normalise_heatmap,
    randomisation_groups,
    sanity_check,
    uses_max_over_sign,
)
from metric_helpers import SIZE, SmallConvNet


def test_ssim_of_identical_maps_is_one_and_sign_flip_handled():
    h = np.random.default_rng(0).random((SIZE, SIZE))
    assert heatmap_ssim(h, h) == pytest.approx(1.0)
    assert heatmap_ssim(h, 5 * h + 2) == pytest.approx(1.0)  # normalisation removes scale and offset
    assert heatmap_ssim(h, -h) < 0
    assert heatmap_ssim(h, -h, max_over_sign=True) == pytest.approx(1.0)
    assert heatmap_ssim(h, np.random.default_rng(1).random((SIZE, SIZE))) < 0.2


def test_normalise_clamps_percentiles():
    h = np.linspace(0, 1, 1000).reshape(10, 100)
    h[0, 0] = -100.0
    h[-1, -1] = 100.0
    n = normalise_heatmap(h)
    assert n.min() == 0.0 and n.max() == 1.0 and np.sum(n == 0.0) >= 10 and np.sum(n == 1.0) >= 10
    assert np.all(normalise_heatmap(np.ones((5, 5))) == 0)


def test_lrp_flag():
    class M:
        key = "lrp_a0b1"

    class G:
        key = "gradient"

    class F:
        key = "gradient"
        sanity_max_over_sign = True

    assert uses_max_over_sign(M()) and not uses_max_over_sign(G()) and uses_max_over_sign(F())


def test_cascade_randomises_from_the_logits_down_on_a_copy():
    net = SmallConvNet()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    names = [n for n, _ in randomisation_groups(net)]
    assert names == ["fc", "conv2", "conv1"]
    seen = []
    for name, model in cascading_randomisation(net, seed=1):
        assert model is not net
        seen.append({k: v.clone() for k, v in model.state_dict().items()})
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())  # original untouched
    changed = [[k for k in before if not torch.equal(before[k], s[k])] for s in seen]
    assert changed[0] == ["fc.weight", "fc.bias"]
    assert set(changed[1]) == {"fc.weight", "fc.bias", "conv2.weight", "conv2.bias"}
    assert len(changed[2]) == len(before)  # all parameters random at the end
    # Reproducible for a seed.
    again = [{k: v.clone() for k, v in m.state_dict().items()} for _, m in cascading_randomisation(net, seed=1)]
    assert all(torch.equal(a[k], b[k]) for a, b in zip(seen, again) for k in a)


def gradient_map(model, x, target):
    x = x.clone().requires_grad_(True)
    model(x)[0, target].backward()
    return x.grad.abs().sum(1)[0].numpy()


def test_sanity_check_separates_model_dependent_from_model_independent_maps():
    net = SmallConvNet()
    x = torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(0))
    edge = sanity_check(net, x, 0, lambda m, x, t: x.abs().sum(1)[0].numpy())  # ignores the model
    assert [n for n, _ in edge] == ["fc", "conv2", "conv1"] and all(s == pytest.approx(1.0) for _, s in edge)
    grad = sanity_check(net, x, 0, gradient_map)
    assert all(s < 0.9 for _, s in grad), grad
    only_fc = sanity_check(net, x, 0, gradient_map, levels=["fc"])
    assert [n for n, _ in only_fc] == ["fc"] and only_fc[0][1] == pytest.approx(grad[0][1])


@dataclasses.dataclass
class _Loaded:
    model: nn.Module
    weights_id: str = "pretrained.pth"
    memo: dict = dataclasses.field(default_factory=dict)

    def stages(self):
        m = self.model
        return [("conv1", m.conv1), ("conv2", m.conv2), (None, m.fc)]


def test_cascade_over_registered_stages_renames_the_weights():
    network = _Loaded(SmallConvNet(), memo={"cached": 1})
    levels = []
    for name, randomised in cascading_randomisation(network):
        assert randomised.model is not network.model and randomised.memo == {}
        levels.append((name, randomised.weights_id))
    assert [n for n, _ in levels] == ["logits", "conv2", "conv1"]
    assert len({w for _, w in levels}) == 3 and all(w.startswith("pretrained.pth+cascade") for _, w in levels)
    assert network.memo == {"cached": 1} and network.weights_id == "pretrained.pth"


def test_table():
    recs = [{"metric": "sanity", "image": i, "method": "g", "setting": "s", "model": "net",
             "levels": ["logits", "conv2"], "ssim": [a, b]} for i, a, b in (("x", 0.5, 0.2), ("y", 0.3, 0.0))]
    table = format_table(recs)
    assert "logits" in table and "0.40" in table and "0.10" in table


def test_cascade_on_the_registered_offline_network(offline_model):
    original = offline_model.model._fc.weight.clone()
    cascade = cascading_randomisation(offline_model)
    name, first = next(cascade)
    assert name == "logits" and first.model is not offline_model.model
    assert not torch.equal(first.model._fc.weight, original) and torch.equal(offline_model.model._fc.weight, original)
    assert torch.equal(first.model._conv_head.weight, offline_model.model._conv_head.weight)
    name, second = next(cascade)
    assert name == "head" and not torch.equal(second.model._conv_head.weight, offline_model.model._conv_head.weight)
    assert first.weights_id != second.weights_id != offline_model.weights_id
    assert second.split("block3_2")[1] is not None  # a working Network
