"""The model-size cap (issue 27.1): every network is built on the meta device first, counted (parameters, and
activations at batch 1), refused above IBA_MAX_PARAMS, and a weights file checked against it before the real build."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from iba_core.networks import WeightsMismatchError, load_network
from iba_core.networks.model_size import (ModelSize, ModelTooLargeError, WeightsCheck, activation_count, build_seeded,
                                          check_size, config_floor, parameter_count, refuse_if_too_large)
from iba_core.settings import DEFAULT_MAX_PARAMS, MAX_PARAMS_ENV, max_params


def test_the_setting_reads_a_positive_count_else_the_default(monkeypatch) -> None:
    monkeypatch.delenv(MAX_PARAMS_ENV, raising=False)
    assert max_params() == DEFAULT_MAX_PARAMS
    monkeypatch.setenv(MAX_PARAMS_ENV, "1234")
    assert max_params() == 1234
    monkeypatch.setenv(MAX_PARAMS_ENV, "lots")
    assert max_params() == DEFAULT_MAX_PARAMS


def test_counts_on_the_meta_device() -> None:
    model = check_size(lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                                             nn.Identity()), "tiny")
    assert all(p.is_meta for p in model.parameters())  # nothing allocated
    # conv 4·3·3·3 + 4; batch norm 4 + 4 weights, running mean and variance 4 + 4, its step counter 1
    assert parameter_count(model) == 112 + 8 + 9
    # conv, batch norm and ReLU each output 4 × 8 × 8; Identity hands its input on and adds nothing
    assert activation_count(model, 8) == 3 * 4 * 8 * 8
    assert not any(m._forward_hooks for m in model.modules())  # the counting hooks are gone


def test_a_failing_meta_forward_leaves_activations_uncounted_and_hooks_removed() -> None:
    class NeedsData(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, x):
            return self.fc(x.mean(dim=(2, 3))) * float(x.sum())  # a value: no meta kernel can give one

    model = check_size(NeedsData, "needs data")
    assert activation_count(model, 8) is None
    assert not model.fc._forward_hooks


def test_refusals_name_the_count_and_the_setting(monkeypatch) -> None:
    monkeypatch.setenv(MAX_PARAMS_ENV, "100000")
    with pytest.raises(ModelTooLargeError) as err:
        check_size(lambda: nn.Linear(1000, 1000), "Wide")
    assert str(err.value) == ("Wide holds 1 million parameters, more than the 100,000 this server builds (setting "
                              "IBA_MAX_PARAMS), so it is not built.")
    assert "IBA_MAX_PARAMS" in err.value.cli_hint and "IBA_MAX_PARAMS" in err.value.app_hint
    # Few parameters, many activations: a convolution of 1,792 numbers on 224-px inputs.
    with pytest.raises(ModelTooLargeError, match="computes 3.21 million activations for one image"):
        check_size(lambda: nn.Conv2d(3, 64, 3, padding=1), "Conv", input_size=224)
    assert check_size(lambda: nn.Conv2d(3, 64, 3, padding=1), "Conv", input_size=32) is not None
    with pytest.raises(ModelTooLargeError, match="holds at least 5 million parameters"):
        refuse_if_too_large(ModelSize(5_000_000), "X", at_least=True)


def test_the_config_floor_is_a_lower_bound_of_the_real_count() -> None:
    from transformers import AutoModelForImageClassification, ViTConfig

    sizes = {"hidden_size": 32, "num_hidden_layers": 2, "intermediate_size": 64}
    config = ViTConfig(image_size=32, patch_size=16, num_attention_heads=2, **sizes)
    real = parameter_count(check_size(lambda: AutoModelForImageClassification.from_config(config), "vit"))
    assert config_floor(sizes) == 2 * 32 * 64 < real
    assert config_floor({"hidden_size": 32, "num_hidden_layers": 2}) == 0  # not all three named
    assert config_floor({**sizes, "intermediate_size": True}) == 0
    giant = {"hidden_size": 16384, "num_hidden_layers": 48, "intermediate_size": 65536}
    assert config_floor(giant) == 48 * 16384 * 65536 > DEFAULT_MAX_PARAMS


@pytest.mark.parametrize("key", ["torchvision:resnet18", "timm:resnet18"])
def test_each_named_source_is_refused_above_the_cap_before_it_is_built(key, monkeypatch, build_devices) -> None:
    monkeypatch.setenv(MAX_PARAMS_ENV, "1000000")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    built = build_devices(nn.Conv2d)
    with pytest.raises(ModelTooLargeError, match=r"resnet18 holds 11.\d million parameters, more than the 1 million"):
        load_network(key, weights="random")
    assert built and set(built) == {"meta"}  # every layer was made on the meta device only


def test_a_weights_file_is_checked_against_the_meta_build_before_the_real_one(tmp_path) -> None:
    save_file({"weight": torch.zeros(3, 5), "bias": torch.zeros(3)}, str(tmp_path / "other.safetensors"))
    devices = []

    def make() -> nn.Module:
        devices.append(torch.get_default_device().type)
        return nn.Linear(4, 3)

    with pytest.raises(WeightsMismatchError, match=r"weight: file \[3, 5\], model \[3, 4\]"):
        build_seeded(make, title="Lin", weights_check=WeightsCheck(tmp_path / "other.safetensors"))
    assert devices == ["meta"]
    save_file({"weight": torch.zeros(3, 4), "bias": torch.zeros(3)}, str(tmp_path / "fits.safetensors"))
    model = build_seeded(make, title="Lin", weights_check=WeightsCheck(tmp_path / "fits.safetensors"))
    assert devices == ["meta", "meta", "cpu"] and not model.weight.is_meta


def test_a_card_builtin_with_a_head_is_counted(tmp_path, monkeypatch) -> None:
    (tmp_path / "classes.txt").write_text("\n".join(f"c{i}" for i in range(5)))
    (tmp_path / "net.toml").write_text('arch = "efficientnet_lite0"\nclasses = "classes.txt"\n')
    monkeypatch.setenv(MAX_PARAMS_ENV, "1000000")
    with pytest.raises(ModelTooLargeError, match=r"net \(model card\) holds 3.\d+ million parameters"):
        load_network(tmp_path / "net.toml", weights="random")
