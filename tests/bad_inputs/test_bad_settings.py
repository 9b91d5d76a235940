"""Bad bottleneck settings (β·k, steps, batch, learning rate, σ_s, initial α, …) through the library, the CLI and
the app: each is refused at construction with one sentence that names the setting's range, before any network
loads or any computation starts (issue #20, point 5: β·k 1e300 used to exit 0 with `total_bits: null`, β·k 1e30
to equal the initial mask, σ_s NaN or inf to crash, σ_s 1e6 to allocate 26.9 GB).
"""
from __future__ import annotations

import math

import pytest
import torch
from PIL import Image

from bad_input_helpers import assert_one_sentence, cli_error, page_errors, run_cli

from iba_core.errors import UserError
from iba_core.per_sample import BottleneckSettings, PerSampleBottleneck

#: (field, bad value, words the message must hold: the setting's range).
BAD_SETTINGS = [
    ("beta_k", 1e300, "β·k must be between 1e-6 and 1e6 (you gave 1e300)"),
    ("beta_k", 1e30, "β·k must be between 1e-6 and 1e6"),
    ("beta_k", math.nan, "(you gave nan)"),
    ("beta_k", 0.0, "between 1e-6 and 1e6"),
    ("beta_k", -1.0, "between 1e-6 and 1e6"),
    ("sigma", math.nan, "σ_s (the mask smoothing) must be between 0 and 100 cells"),
    ("sigma", math.inf, "(you gave inf)"),
    ("sigma", 1e6, "between 0 and 100 cells (you gave 1e6)"),
    ("sigma", -1.0, "between 0 and 100 cells"),
    ("steps", -1, "number of steps must be between 0 and 10000"),
    ("steps", 10**6, "between 0 and 10000"),
    ("steps", 2.5, "must be a whole number"),
    ("batch", 0, "batch of noisy copies must be between 1 and 1024"),
    ("lr", 0.0, "learning rate must be between 1e-6 and 100"),
    ("lr", math.inf, "learning rate must be between 1e-6 and 100"),
    ("init_alpha", 50.0, "initial α must be between -10 and 10"),
    ("min_std", 0.0, "floor on σ_R must be between 1e-6 and 1"),
    ("seed", -1, "seed must be between 0 and"),
    ("inactive_threshold", 1.5, "inactive-unit threshold must be between 0 and 0.999"),
]


# ---- library -------------------------------------------------------------------------------------


@pytest.mark.parametrize("field, value, words", BAD_SETTINGS)
def test_library_refuses_at_construction(field, value, words) -> None:
    with pytest.raises(UserError) as err:
        BottleneckSettings(**{field: value})
    assert words in str(err.value)
    assert_one_sentence(str(err.value))


def test_a_field_changed_after_construction_is_refused_before_a_run(tiny_net, tiny_stats) -> None:
    settings = BottleneckSettings()
    settings.beta_k = 1e300
    with pytest.raises(UserError, match="β·k must be between"):
        PerSampleBottleneck.from_split(tiny_net.prefix(), tiny_net.suffix(), tiny_stats, settings)


def test_a_blur_wider_than_the_map_is_refused_before_any_computation(tiny_net, tiny_stats) -> None:
    """TinyNet's map is 8 × 8: σ_s 8 is the most that means anything there."""
    def prefix_must_not_run(*args):
        raise AssertionError("the network ran before the settings were checked")

    prefix = tiny_net.prefix()
    prefix.register_forward_pre_hook(prefix_must_not_run)
    with pytest.raises(UserError) as err:
        PerSampleBottleneck.from_split(prefix, tiny_net.suffix(), tiny_stats, BottleneckSettings(sigma=9.0))
    assert str(err.value) == ("σ_s (the mask smoothing) must be at most 8 cells here, the size of the layer's "
                              "8 × 8 feature map (you gave 9).")
    with pytest.raises(UserError, match="at most 8 cells"):
        PerSampleBottleneck(tiny_net, "conv2", tiny_stats, BottleneckSettings(sigma=9.0))
    assert PerSampleBottleneck.from_split(tiny_net.prefix(), tiny_net.suffix(), tiny_stats,
                                          BottleneckSettings(sigma=8.0, steps=1, precision="fp32")) is not None


def test_the_ranges_hold_what_the_paper_searched(tiny_net, tiny_stats) -> None:
    """The paper's search spaces (Appendix) lie inside the ranges, and their ends still give finite maps."""
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    for beta_k in (1e-6, 0.001, 300.0, 1e6):
        for lr, steps, batch, sigma in ((0.03, 1, 1, 0.5), (10.0, 3, 30, 2.0)):
            settings = BottleneckSettings(beta_k=beta_k, lr=lr, steps=steps, batch=batch, sigma=sigma,
                                          precision="fp32")
            result = PerSampleBottleneck.from_split(tiny_net.prefix(), tiny_net.suffix(), tiny_stats,
                                                    settings).attribute(x, target=1)
            assert math.isfinite(result.total_bits) and (result.heatmap >= 0).all()


def test_readout_settings_share_the_ranges() -> None:
    from iba_core.readout import ReadoutConfig, TrainConfig

    base = dict(model="m", weights_id="w", layer="l", reads=("l",), feature_shape=(4, 7, 7), read_channels=(4,))
    with pytest.raises(UserError, match="β·k must be between 1e-6 and 1e6"):
        ReadoutConfig(**base, beta_k=1e300)
    with pytest.raises(UserError, match="at most 7 cells"):
        ReadoutConfig(**base, sigma=10.0)
    for bad, words in ((dict(beta_k=math.inf), "β·k"), (dict(sigma=math.nan), "σ_s"),
                       (dict(lr=5.0), "learning rate"), (dict(epochs=0), "number of epochs"),
                       (dict(batch_size=-2), "batch size")):
        with pytest.raises(UserError, match=words) as err:
            TrainConfig(**bad)
        assert_one_sentence(str(err.value))
    cfg = TrainConfig(sample_photos=2)
    cfg.beta_k = 1e300  # as the CLI sets given options one by one: validate() checks before a run
    with pytest.raises(UserError, match="β·k"):
        cfg.validate()


def test_per_sample_method_refuses_when_made() -> None:
    from iba_core.methods import get_method

    with pytest.raises(UserError, match="σ_s .* between 0 and 100 cells"):
        get_method("iba_10", sigma=math.inf)
    with pytest.raises(UserError, match="number of steps"):
        get_method("iba_10", steps=math.nan)


# ---- CLI -----------------------------------------------------------------------------------------


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "photo.png"
    Image.new("RGB", (32, 32), (120, 80, 40)).save(path)
    return path


@pytest.fixture
def no_network(monkeypatch):
    """Loading a network fails the test: the settings must be refused first."""
    import iba_core.networks
    import iba_core.readout.training.loop

    def refuse(*args, **kwargs):
        raise AssertionError("the network was loaded before the settings were checked")

    monkeypatch.setattr(iba_core.networks, "load_network", refuse)
    monkeypatch.setattr(iba_core.readout.training.loop, "load_network", refuse)


@pytest.mark.parametrize("option, value, words", [
    ("--beta-k", "1e300", "β·k must be between 1e-6 and 1e6 (you gave 1e300)."),
    ("--beta-k", "1e30", "β·k must be between 1e-6 and 1e6 (you gave 1e30)."),
    ("--sigma", "nan", "σ_s (the mask smoothing) must be between 0 and 100 cells (you gave nan)."),
    ("--sigma", "inf", "(you gave inf)."),
    ("--sigma", "1e6", "(you gave 1e6)."),
    ("--lr", "0", "learning rate must be between 1e-6 and 100"),
    ("--steps", "-3", "number of steps must be between 0 and 10000"),
    ("--batch", "0", "batch of noisy copies must be between 1 and 1024"),
])
def test_cli_attribute_refuses_before_the_network_loads(image, no_network, option, value, words) -> None:
    result = run_cli(["attribute", image, option, value])
    assert result.code == 1 and result.out == ""
    message = cli_error(result)
    assert len([line for line in result.err.splitlines() if line.strip()]) == 1, result.err
    assert words in message
    assert_one_sentence(message)


def test_cli_train_readout_refuses_before_the_network_loads(tmp_path, no_network) -> None:
    result = run_cli(["train-readout", "--sample-photos", "2", "--beta-k", "1e300", "--out", tmp_path / "r"])
    message = cli_error(result)
    assert result.code == 1 and "β·k must be between 1e-6 and 1e6" in message
    assert len([line for line in result.err.splitlines() if line.strip()]) == 1, result.err
    assert_one_sentence(message)


# ---- app -----------------------------------------------------------------------------------------


def test_app_refuses_a_blur_wider_than_the_layer_and_keeps_the_previous_result(open_page) -> None:
    """The σ_s field allows up to 10; EfficientNet-Lite0's block6_1 is 7 × 7, so 10 is refused there."""
    at = open_page("per_sample")
    at.number_input(key="ps_steps").set_value(1)
    at.button(key="ps_run_button").click().run()
    assert not page_errors(at)
    record = at.session_state["ps_run"]
    at.selectbox(key="ps_layer_efficientnet_lite0").set_value("block6_1")
    at.number_input(key="ps_sigma").set_value(10.0)
    at.button(key="ps_run_button").click().run()
    errors = page_errors(at)
    assert len(errors) == 1 and "at most 7 cells" in errors[0] and "(you gave 10)" in errors[0]
    assert "--" not in errors[0]
    assert_one_sentence(errors[0])
    assert at.session_state["ps_run"] is record  # the previous result stays


@pytest.mark.parametrize("command", ["stats", "attribute"])
@pytest.mark.parametrize("value", ["-5", "0", "abc", "2000000"])
def test_cli_sample_counts_are_bounded_before_anything_loads(command, value, monkeypatch) -> None:
    import iba_core.networks as networks

    monkeypatch.setattr(networks, "load_network", lambda *a, **k: pytest.fail("the network loaded"))
    argv = [command, "--n", value] + (["nothing.jpg"] if command == "attribute" else [])
    result = run_cli(argv)
    assert result.code == 2 and "--n" in result.err and "number of samples" in result.err
    assert "Traceback" not in result.err


def test_library_and_app_bound_the_samples(monkeypatch, offline_model) -> None:
    from iba_core.app.stats_source import check_samples
    from iba_core.feature_stats import get_stats

    with pytest.raises(UserError, match="between 1 and 1e6"):
        get_stats(offline_model, offline_model.spec.default_layer, n=-5)
    monkeypatch.setenv("IBA_MAX_STATS_SAMPLES", "300")
    assert check_samples(300) == 300
    with pytest.raises(UserError) as err:
        check_samples(301)
    assert "between 1 and 300" in str(err.value) and "IBA_MAX_STATS_SAMPLES" in err.value.app_hint
    assert_one_sentence(str(err.value))


def test_the_app_caps_the_samples_field_at_the_owners_limit(open_page, monkeypatch) -> None:
    monkeypatch.setenv("IBA_MAX_STATS_SAMPLES", "300")
    at = open_page("per_sample")
    field = at.number_input(key="ps_n")
    assert field.max == 300 and field.value <= 300


def test_an_unknown_layer_of_100000_characters_is_not_echoed_whole() -> None:
    """Issue #40, item 8: the sentence names the start of what was typed (cut, marked '…'), on one line."""
    from iba_core.networks.spec import unknown_layer_error

    for layers in (["a", "b"], [f"block{i}_{j}" for i in range(9) for j in range(9)]):
        text = str(unknown_layer_error("Net", "x" * 100_000 + "\nmore", layers))
        assert len(text) < 400 and "…" in text and "\n" not in text
        assert_one_sentence(text)
