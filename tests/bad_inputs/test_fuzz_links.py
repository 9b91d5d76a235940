"""Fuzzing the app's links and layer names (issue #40): any query parameters give a view and one sentence per value
that cannot be used, never an exception (`links.from_params` never raises); any layer name or layer range, typed or
from a link, is a layer of the network or one sentence (`links.fit`, `coiba.parse_range`, `coiba.layer_range`,
`spec.check_layer`, the CLI's --layer-range)."""
from __future__ import annotations

import argparse

import pytest
import torch.nn as nn
from hypothesis import example, given, strategies as st

from bad_input_helpers import assert_one_sentence
from fuzz_helpers import fuzz_settings, hostile_piece, hostile_text, mutated, result_or_sentence
from iba_core.app.links import PARAMS, View, fit, from_params, to_params
from iba_core.cli.common import layer_range_arg
from iba_core.coiba import layer_range, parse_range
from iba_core.networks import network_from_module

#: A link that opens (its values from the app's own writer).
VALID_PARAMS = {"image": "chelsea", "network": "efficientnet_lite0", "layer": "block3_2", "beta_k": "10",
                "target": "281", "step": "3"}


@pytest.fixture(scope="module")
def chain():
    """A network of 61 layers (more than MAX_LISTED_LAYERS: an unknown name gets the closest ones, by difflib) and
    classes of which two share a name, built once for the module."""
    blocks = [nn.Sequential(nn.Conv2d(3, 3, 1), nn.ReLU()) for _ in range(20)]
    model = nn.Sequential(*blocks, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(3, 4)).eval()
    return network_from_module(model, "fuzz-chain", categories=["cat", "dog", "crane", "crane"])


def param_values() -> st.SearchStrategy[str]:
    return st.one_of(hostile_text(120), st.sampled_from(("upload:" + "0" * 16, "upload:../../x", "card:", "card:x",
                                                         "torchvision:", "torchvision:resnet18", "a:b", ":", "a:",
                                                         "1e-6", "1e6", "0", "10")))


def params() -> st.SearchStrategy[dict]:
    names = st.one_of(st.sampled_from(PARAMS), hostile_text(10))
    return st.one_of(st.dictionaries(names, param_values(), max_size=8),
                     st.builds(lambda k, v: {**VALID_PARAMS, k: v}, st.sampled_from(PARAMS), mutated("block3_2")))


@given(query=params())
@example(query={"beta_k": "1e-6"})
@example(query={"target": "٣", "step": "𝟗"})
@example(query=VALID_PARAMS)
@fuzz_settings(examples=300)
def test_any_link_opens_a_view_and_says_each_problem_in_one_sentence(query) -> None:
    view, problems = from_params(query)
    assert isinstance(view, View)
    for problem in problems:
        assert_one_sentence(problem)
    # what was kept writes back as a link that reads to the same view without a problem of its own
    again, _ = from_params(to_params(view))
    assert again == view


@given(query=params(), layer=st.one_of(hostile_text(120), st.sampled_from(("0.0", "19", "5", "0", "1.1"))))
@example(query={}, layer="\x00" * 4 + "0\U0002ebe1" * 8)  # the range's and the layer's reprs: 402 characters
@fuzz_settings(examples=150)
def test_a_links_layer_range_and_class_fit_the_network_or_are_left_out_in_one_sentence(chain, query, layer) -> None:
    view, _ = from_params({**query, "layer": layer, "range": f"{layer}:{query.get('layer', '19')}"})
    fitted, problems = fit(view, chain)
    for problem in problems:
        assert_one_sentence(problem)
    assert fitted.layer is None or fitted.layer in chain.spec.layers
    assert fitted.target is None or 0 <= fitted.target < len(chain.categories)


def layer_names() -> st.SearchStrategy[str]:
    return st.one_of(hostile_text(), mutated("0.1"), mutated("block3_2"), st.sampled_from(("0.0", "19", "1.0")))


@given(first=layer_names(), last=layer_names(), sep=st.sampled_from((":", "::", " : ", "\u2028:", "")))
@example(first="0", last="19", sep=":")
@example(first="19", last="0", sep=":")  # backwards
@example(first="a" * 100_000, last="0", sep=":")
@fuzz_settings(examples=300)
def test_any_layer_range_is_layers_of_the_network_or_one_sentence(chain, first, last, sep) -> None:
    text = f"{first}{sep}{last}"
    try:
        cli = layer_range_arg(text)
    except argparse.ArgumentTypeError as err:
        assert_one_sentence(str(err))
        cli = None
    parsed = result_or_sentence(parse_range, text)
    assert parsed == cli
    if parsed is not None:
        layers = result_or_sentence(layer_range, chain, *parsed)
        assert layers is None or (layers[0] == parsed[0] and set(layers) <= set(chain.spec.layers))
    if text == "0:19":
        assert layer_range(chain, "0", "19")[-1] == "19"


@given(name=layer_names())
@example(name="a" * 100_000)
@example(name="\ufeff" * 1_000)  # its repr was quoted whole: a sentence of 535 characters
@fuzz_settings(examples=200)
def test_any_layer_name_is_a_layer_or_one_sentence(chain, name) -> None:
    assert result_or_sentence(chain.spec.check_layer, name) in (None, name)
