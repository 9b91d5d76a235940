"""iba_core.app.bottleneck_choice: the bottlenecks the Per-Sample page offers, their defaults, a CoIBA run's words."""
from __future__ import annotations

from types import SimpleNamespace

from iba_core.app import bottleneck_choice as bc
from iba_core.networks.clip_models import PromptAnswers


def test_m2ib_is_offered_for_a_clip_model_only_and_its_help_follows() -> None:
    classifier = SimpleNamespace(model=object())
    clip = SimpleNamespace(model=PromptAnswers.__new__(PromptAnswers))  # no weights: only its class is asked
    assert bc.offered_bottlenecks(classifier) == ["per_sample", "coiba"]
    assert bc.offered_bottlenecks(clip) == ["per_sample", "coiba", "m2ib"]
    assert "M2IB" not in bc.bottleneck_help(bc.offered_bottlenecks(classifier))
    assert "M2IB (Wang et al." in bc.bottleneck_help(bc.offered_bottlenecks(clip))


def test_the_defaults_are_the_authors_settings() -> None:
    assert bc.m2ib_defaults().beta_k == 0.1
    assert bc.coiba_defaults().beta_k == 1.0


def test_a_coiba_caption_names_its_placement_and_the_layers() -> None:
    outputs = bc.coiba_caption(("layer3", "layer4"))
    assert outputs.startswith("CoIBA at 2 layers, layer3 → layer4:") and "upper bound" in outputs
    branches = bc.coiba_caption(tuple(f"blocks.{i}.norm1" for i in range(6)))
    assert branches.startswith("CoIBA at the attention-branch inputs of 6 blocks, blocks.0.norm1 … blocks.5.norm1")
    assert bc.shared_lambda_title(("a", "b", "c")) == "λ (shared by 3 layers)"
    assert bc.shared_lambda_title(()) is None
