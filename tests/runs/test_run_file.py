"""run.json read back as data (`runs.run_file`, issue #40 item 2): a real run's file, mutated at random by Hypothesis
(a field replaced by another JSON type, an extreme number, a long text, brackets nested thousands deep, the file cut
short), gives either the run's fields or one RunFolderError (a UserError), never another exception; and what it
accepts, every reader of a run's fields (the Dataset page's captions, the report's header, the links, the rerun
command, the metrics' protocol) reads without another exception. The exact cases of the issue are in
tests/bad_inputs/test_bad_run_files.py."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from run_fixtures import make_shortcut_run

from iba_core.errors import UserError
from iba_core.runs.run_file import check_info, parse_run_file
from iba_core.runs.tables import Run, open_run

#: A placeholder a mutation writes into the JSON text, replaced by brackets nested `n` deep afterwards (json.dumps
#: itself refuses to nest that deep).
DEEP_MARK = "\u0000deep\u0000"


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Run:
    """A finished run of the tiny CNN; its run.json is the seed of every mutation."""
    run_dir, _ = make_shortcut_run(tmp_path_factory.mktemp("run_file") / "root", per_class=2)
    return open_run(run_dir)


def richer(info: dict) -> dict:
    """The run's file as a run with more would write it: a CLIP run's prompts, every metric with its protocol, a
    CoIBA method (its layer range and statistics per layer) and a Grad-CAM beside the Per-Sample Bottleneck."""
    from iba_core.metrics.yardsticks import YARDSTICKS, YardstickOptions, yardstick_identity

    coiba = {"name": "CoIBA", "unit": "bits/pixel", "layers": ["features.0", "features.3"], "settings": {
        "beta_k": 1.0, "layers": ["features.0", "features.3"], "layer": "features.0", "placement": "output",
        "steps": 10, "batch": 10, "lr": 1.0, "sigma": 0.0, "read_point": "last_step", "inactive_threshold": None,
        "mask": "location", "seed": 0, "precision": "fp32", "stats_images": None, "stats_samples": None,
        "stats": {"features.0": {"n": 16, "source": "background"}, "features.3": {"n": 16, "source": "background"}}}}
    grad_cam = {"name": "Grad-CAM", "unit": "relevance", "layers": ["features.3"],
                "settings": {"layer": "features.3", "layer_input": None}}
    return json.loads(json.dumps({
        **info, "prompts": ["a red square", "a green square"],
        "settings": {**info["settings"], "yardsticks": yardstick_identity(YARDSTICKS, YardstickOptions())},
        "methods": {**info["methods"], "coiba": coiba, "grad_cam": grad_cam}}))


def paths(value, prefix=()) -> list[tuple]:
    """Every place in a JSON value, as the keys (or indices) leading to it."""
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += paths(item, (*prefix, i))
    return out


def replaced(value, path: tuple, new):
    """`value` with the item at `path` replaced by `new` (a copy)."""
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = replaced(copy[path[0]], path[1:], new)
    return copy


EXTREMES = st.sampled_from([0, -1, 1, 6000, 10**30, -(10**30), 2**63, 1e308, -1e308, 1e-320, math.inf, -math.inf,
                            math.nan, True, False, None, "", "x" * 5000, "../../etc", "224", [], {}, [[]], {"": {}}])
SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30)
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8),
                                                                                          inner, max_size=4),
                      max_leaves=12)


@st.composite
def mutated_files(draw, base: dict) -> bytes:
    """run.json's bytes with one to three places replaced (another JSON type, an extreme, brackets nested up to
    100,000 deep), sometimes cut short."""
    info, deep = base, None
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(paths(info)))
        kind = draw(st.sampled_from(["value", "extreme", "deep"]))
        if kind == "deep" and deep is None:
            deep = draw(st.sampled_from([2, 10, 100, 2_000, 100_000]))
            new = DEEP_MARK
        else:
            new = draw(VALUES if kind == "value" else EXTREMES)
        info = replaced(info, where, new)
    text = json.dumps(info)
    if deep is not None:
        text = text.replace(json.dumps(DEEP_MARK), "[" * deep + "]" * deep, 1)
    data = text.encode("utf-8")
    if draw(st.integers(0, 9)) == 0:
        data = data[: draw(st.integers(0, max(len(data) - 1, 0)))]
    return data


def read_every_field(run: Run) -> None:
    """What the app, the report and a rerun read from run.json: each may raise a UserError, nothing else."""
    from iba_core.app import dataset as ds
    from iba_core.app.dataset_gallery import _preprocess, run_layer
    from iba_core.app.prompt_search import add_prompt_command, run_prompts
    from iba_core.metrics.yardsticks import protocol_sentences
    from iba_core.runs.store import differences, merged_prompts

    ds.method_units(run), ds.methods_bits_first(run), ds.run_line(run)
    for method in ds.method_names(run):
        ds.method_layer_text(run, method)
        run_layer(run, method)
    _preprocess(run, 64, 70)
    run_prompts(run), add_prompt_command(run, "a dog"), str(run.source)
    protocol_sentences((run.info.get("settings") or {}).get("yardsticks") or {})
    differences(run.info, run.info), merged_prompts(run.info.get("prompts"), ["a dog"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(data=st.data())
def test_a_mutated_run_file_gives_the_run_or_one_sentence(real_run, data) -> None:
    raw = data.draw(mutated_files(data.draw(st.sampled_from([real_run.info, richer(real_run.info)]))))
    try:
        info = parse_run_file(raw)
    except UserError as err:
        assert err.message and "\n" not in err.message and len(err.message) <= 400, err.message
        return
    try:
        read_every_field(Run(real_run.path, info, real_run.table))
    except UserError:
        pass


def test_the_real_run_file_is_accepted_as_written(real_run) -> None:
    """The bounds are the writers': what a run wrote passes unchanged (and a round trip through JSON too)."""
    assert check_info(real_run.info) is real_run.info
    data = (Path(real_run.path) / "run.json").read_bytes()
    assert parse_run_file(data) == real_run.info
    read_every_field(real_run)
    rich = richer(real_run.info)
    assert check_info(rich) is rich
    read_every_field(Run(real_run.path, rich, real_run.table))
