"""`find_concepts` (concepts/discover.py) on the hand-made network of `concept_fixtures`: the bits share and the
effect of every concept worked out by hand — the layer's activations from the network's own convolution, the
coefficients by scipy's NNLS against the stored concepts, the bits from the run's maps, the head run by hand — and
the plan's refusals (another network, a prompt run, a class, a K, a layer or a method the run does not have)."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image
from scipy.optimize import nnls

from concept_fixtures import CLASSES, GRID, K, PER_CLASS, hand_module, write_hand_card
from iba_core.concepts import ConceptSettings, find_concepts, open_concepts
from iba_core.concepts.measures import USE_SHARE, bits_per_cell
from iba_core.concepts.store import CONCEPT_COLUMNS, FITS
from iba_core.errors import UserError
from iba_core.runs.tables import open_run

GROUPS = ["class-0", "class-1", "all"]


def hand_layer(net, data_dir, image: str) -> np.ndarray:
    """The concept layer's activations (C, h, w) of an image: the network's preprocessing, its first module."""
    x = net.preprocess(Image.open(data_dir / image).convert("RGB"))
    with torch.no_grad():
        return net.model.cells(x)[0].double().numpy()


def hand_p(net, grid: np.ndarray, target: int) -> float:
    """p(target) of the network whose concept layer gives `grid`: pooling and the linear head, by hand."""
    pooled = torch.from_numpy(grid.mean(axis=(1, 2))).float()
    logits = net.model.fc.weight.detach() @ pooled + net.model.fc.bias.detach()
    return float(torch.softmax(logits.double(), 0)[target])


def hand_coefficients(components: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """U (h·w, K): each location's non-negative least squares against the concepts (scipy's NNLS, not the core's
    solver); W has full rank here, so U is unique."""
    cols = positive.reshape(len(positive), -1).T
    return np.stack([nnls(components.T, v)[0] for v in cols])


def shares_of(u: np.ndarray, components: np.ndarray) -> np.ndarray:
    mass = u * np.abs(components).sum(axis=1)
    total = mass.sum(axis=1, keepdims=True)
    return np.divide(mass, total, out=np.zeros_like(mass), where=total > 0)


@pytest.fixture(scope="module")
def opened(hand_concepts):
    return open_concepts(hand_concepts), open_run(hand_concepts)


def test_the_set_has_every_group_with_k_concepts_and_typed_columns(opened):
    cs, _ = opened
    assert cs.missing is None
    assert list(cs.concepts.columns) == list(CONCEPT_COLUMNS)
    assert sorted(cs.concepts["group"].unique()) == sorted(GROUPS)
    for group in GROUPS:
        rows = cs.concepts[cs.concepts["group"] == group]
        assert list(rows["concept"]) == list(range(K)) and set(rows["fit_index"]) == set(range(K))
        assert (np.diff(rows["bits_share"]) <= 0).all()  # concept 0 carries the most bits
        assert rows["bits_share"].sum() == pytest.approx(1.0, abs=0.02)  # nearly every bit lies on some concept
    names = cs.concepts.drop_duplicates("group").set_index("group")["class_name"]
    assert (names["class-0"], names["class-1"], names["all"]) == (CLASSES[0], CLASSES[1], "all images")
    assert len(cs.images) == K * (PER_CLASS * 2 + PER_CLASS * 2)  # classes, then the whole run


def test_fit_error_is_the_relative_error_of_the_fit(opened, hand_net, hand_root):
    """fit_error: ‖V − U W‖ / ‖V‖ over the group's location vectors (every one fitted here: 64 cells × 6 images is
    under FIT_ROWS), U by NNLS against the stored W — NMF's fit leaves W and U each optimal for the other."""
    cs, _ = opened
    for group in GROUPS:
        components = np.load(cs.path / FITS / f"{group}.npz")["W"].astype(np.float64)
        images = sorted(cs.images[cs.images["group"] == group]["image"].unique())
        positive = [np.maximum(hand_layer(hand_net, hand_root / "data", i), 0) for i in images]
        v = np.concatenate([p.reshape(len(p), -1).T for p in positive])
        u = np.concatenate([hand_coefficients(components, p) for p in positive])
        error = np.linalg.norm(v - u @ components) / np.linalg.norm(v)
        got = cs.concepts[cs.concepts["group"] == group]["fit_error"]
        assert 0 < error < 0.5
        np.testing.assert_allclose(got, error, rtol=1e-4)  # measured 3e-11


def test_bits_share_by_hand(opened, hand_net, hand_root):
    """Each image's bits share = Σ B·r_k / Σ B, B the run's bits map summed into the layer's cells, r_k from U by
    NNLS; the class's pooled over its images; the stored concept maps are U_k·‖W_k‖₁."""
    cs, run = opened
    for group in GROUPS:
        components = np.load(cs.path / FITS / f"{group}.npz")["W"].astype(np.float64)
        rows = cs.images[cs.images["group"] == group]
        bits_in, bits_all = np.zeros(K), 0.0
        for image, per in rows.groupby("image"):
            per = per.sort_values("fit_index")
            layer = hand_layer(hand_net, hand_root / "data", image)
            u = hand_coefficients(components, np.maximum(layer, 0))
            run_row = run.table[run.table["image"] == image].iloc[0]
            cell_bits = bits_per_cell(run.heatmap(run_row), (GRID, GRID))
            mine = cell_bits @ shares_of(u, components)
            assert per["total_bits"].iloc[0] == pytest.approx(cell_bits.sum(), rel=1e-4)
            np.testing.assert_allclose(per["bits_share"], mine / cell_bits.sum(), rtol=1e-3)  # measured ≤ 9e-5
            np.testing.assert_allclose(per["bits"], mine, rtol=1e-3)
            assert list(per["uses"]) == list(mine / cell_bits.sum() >= USE_SHARE)
            stored = np.stack([cs.concept_map(r) for _, r in per.iterrows()])  # (K, h, w), float16 on disk
            mass = (u * np.abs(components).sum(axis=1)).T.reshape(K, GRID, GRID)
            np.testing.assert_allclose(stored, mass, atol=1e-3 * mass.max())  # measured 2e-4 of the peak
            bits_in, bits_all = bits_in + mine, bits_all + cell_bits.sum()
        table = cs.concepts[cs.concepts["group"] == group].sort_values("fit_index")
        np.testing.assert_allclose(table["bits_share"], bits_in / bits_all, rtol=1e-3)
        # pooled, not the mean of the images' shares: an image with more bits weighs more
        by_images = rows.groupby("fit_index")
        np.testing.assert_allclose(table["bits_share"], by_images["bits"].sum() / by_images["total_bits"].sum(),
                                   rtol=1e-4)
        assert list(table["images_using"]) == list(by_images["uses"].sum())


def test_effect_by_hand(opened, hand_net, hand_root):
    """p_without: the head on P − min(U_k W_k, P) + N; p_only: on min(U_k W_k, P) + N (N the negative part, kept);
    p_none: on N alone; p_full on the layer as it is; the class figures their means over the images, kept =
    (p_only − p_none) / (p_full − p_none) of the means."""
    cs, _ = opened
    sensitive = 0.0  # how much dropping the negative part would change p: the check can tell
    for group in GROUPS:
        components = np.load(cs.path / FITS / f"{group}.npz")["W"].astype(np.float64)
        rows = cs.images[cs.images["group"] == group]
        for image, per in rows.groupby("image"):
            per = per.sort_values("fit_index")
            target = int(per["target"].iloc[0])
            layer = hand_layer(hand_net, hand_root / "data", image)
            positive, negative = np.maximum(layer, 0), np.minimum(layer, 0)
            u = hand_coefficients(components, positive)
            assert per["p_full"].iloc[0] == pytest.approx(hand_p(hand_net, layer, target), rel=1e-4)
            assert (per["p_none"] == per["p_none"].iloc[0]).all()  # nothing kept: one figure per image
            assert per["p_none"].iloc[0] == pytest.approx(hand_p(hand_net, negative, target), rel=1e-4)
            for k in range(K):
                part = np.minimum((u[:, k:k + 1] * components[k][None, :]).T.reshape(layer.shape), positive)
                row = per.iloc[k]
                assert row["p_without"] == pytest.approx(hand_p(hand_net, positive - part + negative, target),
                                                         rel=1e-4)
                assert row["p_only"] == pytest.approx(hand_p(hand_net, part + negative, target), rel=1e-4)
                sensitive = max(sensitive, abs(hand_p(hand_net, part, target) - row["p_only"]))
        table = cs.concepts[cs.concepts["group"] == group].sort_values("fit_index")
        means = rows.groupby("fit_index")[["p_full", "p_without", "p_only", "p_none"]].mean()
        for column in ("p_full", "p_without", "p_only", "p_none"):
            np.testing.assert_allclose(table[column], means[column], rtol=1e-4)
        np.testing.assert_allclose(table["effect"], means["p_full"] - means["p_without"], rtol=1e-4, atol=1e-7)
        kept = (means["p_only"] - means["p_none"]) / (means["p_full"] - means["p_none"])
        np.testing.assert_allclose(table["kept"], kept, rtol=1e-4, atol=1e-6)
    assert sensitive > 1e-3


def test_the_red_concept_is_found_where_the_squares_are(opened):
    """The red class's top concept (by bits) peaks on each image's red square (16 px squares at (row, col) 0, 0;
    24, 36; 44, 12 of 64) and removing it lowers p(red)."""
    cs, _ = opened
    top = cs.group(0).iloc[0]
    assert top["effect"] > 0.05 and top["bits_share"] > 0.5
    squares = {"red/0.png": (0, 0), "red/1.png": (24, 36), "red/2.png": (44, 12)}
    rows = cs.image_rows(0, 0)
    assert list(rows["rank"]) == list(range(1, PER_CLASS + 1))
    assert json.loads(top["top_images"]) == list(rows["image"])
    for _, row in rows.iterrows():
        top_px, left_px = squares[row["image"]]
        assert left_px <= row["peak_x"] * 64 <= left_px + 16 and top_px <= row["peak_y"] * 64 <= top_px + 16
        grid = cs.concept_map(row)
        r, c = np.unravel_index(np.argmax(grid), grid.shape)
        assert (row["peak_x"], row["peak_y"]) == ((c + 0.5) / GRID, (r + 0.5) / GRID)
        big = cs.concept_map(row, size=(64, 64))
        assert big.shape == (64, 64) and (big >= 0).all()


def test_the_summary_says_what_was_done(hand_root, hand_net, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(hand_root / "run", run)
    seen = []
    summary = find_concepts(hand_net, run, ConceptSettings(k=K, classes=(1,), whole_run=False),
                            progress=lambda done, total, label: seen.append((done, total, label)))
    assert summary.done == ["class-1"] and summary.skipped == [] and summary.damaged == []
    assert summary.images == PER_CLASS and summary.unreadable == [] and summary.seconds > 0
    assert seen[-1] == (2 * PER_CLASS, 2 * PER_CLASS, "measure class-1")  # both passes counted, the last named
    assert seen[0][2] == "fit class-1"
    assert list(open_concepts(run).concepts["group"].unique()) == ["class-1"]


@pytest.fixture(scope="module")
def other_net(hand_root, tmp_path_factory):
    """The hand-made network with other weights (a changed head): another run's network."""
    from run_fixtures import load_card

    root = tmp_path_factory.mktemp("other")
    shutil.copytree(hand_root / "background", root / "background")
    model = hand_module().HandNet(2, head=((1.0, -1.0, 0.5), (-1.0, 1.0, 0.5)))
    return load_card(write_hand_card(root / "card", model=model))


@pytest.mark.parametrize("settings, words", [
    (ConceptSettings(classes=(5,)), "no images of class 5"),
    (ConceptSettings(k=0), "must be 1 to 64, not 0"),
    (ConceptSettings(k=65), "must be 1 to 64"),
    (ConceptSettings(layer="no_such_layer"), "no_such_layer"),
    (ConceptSettings(method="gradient"), "no method 'gradient'"),
])
def test_settings_the_run_cannot_take_are_one_sentence(hand_root, hand_net, settings, words):
    before = sorted(p.name for p in (hand_root / "run").iterdir())
    with pytest.raises(UserError, match=words):
        find_concepts(hand_net, hand_root / "run", settings)
    assert sorted(p.name for p in (hand_root / "run").iterdir()) == before  # nothing written


def test_another_runs_network_is_refused(hand_root, other_net):
    assert other_net.key == "card:hand"  # the same name: the weights tell them apart
    with pytest.raises(UserError, match="Concepts need the run's own network"):
        find_concepts(other_net, hand_root / "run", ConceptSettings(k=K))
    assert not (hand_root / "run" / "concepts").exists()


def test_a_prompt_run_is_refused(hand_root, hand_net, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(hand_root / "run", run)
    info = json.loads((run / "run.json").read_text())
    info["settings"]["targets"] = "prompts"
    (run / "run.json").write_text(json.dumps(info))
    with pytest.raises(UserError, match="explains text prompts"):
        find_concepts(hand_net, run, ConceptSettings(k=K))
    assert not (run / "concepts").exists()


def test_a_method_without_bits_is_refused(hand_root, hand_net, tmp_path):
    """A run whose method gives no bits cannot share bits out: asking for it by name is one sentence."""
    run = tmp_path / "run"
    shutil.copytree(hand_root / "run", run)
    info = json.loads((run / "run.json").read_text())
    info["methods"]["iba_10"]["unit"] = "relevance"
    (run / "run.json").write_text(json.dumps(info))
    with pytest.raises(UserError, match="gives no bits"):
        find_concepts(hand_net, run, ConceptSettings(k=K, method="iba_10"))


def test_concepts_of_a_run_without_bits_rank_by_effect(hand_root, hand_net, tmp_path):
    """The run's only method read as giving no bits: bits share NaN, concepts ordered by effect, 'uses' by presence."""
    run = tmp_path / "run"
    shutil.copytree(hand_root / "run", run)
    info = json.loads((run / "run.json").read_text())
    info["methods"]["iba_10"]["unit"] = "relevance"
    (run / "run.json").write_text(json.dumps(info))
    find_concepts(hand_net, run, ConceptSettings(k=K, whole_run=False))
    cs = open_concepts(run)
    assert cs.concepts["bits_share"].isna().all() and cs.images["bits_share"].isna().all()
    for group in ("class-0", "class-1"):
        rows = cs.concepts[cs.concepts["group"] == group]
        assert (np.diff(rows["effect"]) <= 0).all()
    assert list(cs.images["uses"]) == list(cs.images["presence"] >= USE_SHARE)
    assert isinstance(cs.images, pd.DataFrame) and cs.missing is None


def test_a_streamed_group_is_fitted_by_minibatchnmf_and_agrees(hand_root, hand_net, opened, tmp_path, monkeypatch):
    """Groups over STREAM_IMAGES images (here 2) stream through MiniBatchNMF; on this data its concepts carry nearly
    the bits of the NMF fit's (measured: within 0.006)."""
    from iba_core.concepts import discover
    from iba_core.concepts.store import read_fit

    run = tmp_path / "run"
    shutil.copytree(hand_root / "run", run)
    monkeypatch.setattr(discover, "STREAM_IMAGES", 2)
    find_concepts(hand_net, run, ConceptSettings(k=K, batch_images=1))
    cs = open_concepts(run)
    for group in GROUPS:
        assert read_fit(cs.path, group)[1]["solver"] == "MiniBatchNMF"
        streamed = cs.concepts[cs.concepts["group"] == group]["bits_share"].to_numpy()
        fitted = opened[0].concepts[opened[0].concepts["group"] == group]["bits_share"].to_numpy()
        np.testing.assert_allclose(streamed, fitted, atol=0.03)


def test_k_by_the_elbow(hand_root, hand_net, tmp_path):
    """Without a K: the elbow over K = 2 … min(k_max, channels) = 2 … 3, recorded with the fit; the set is 'kauto'."""
    from iba_core.concepts.store import read_fit

    run = tmp_path / "run"
    shutil.copytree(hand_root / "run", run)
    summary = find_concepts(hand_net, run, ConceptSettings(classes=(0,), whole_run=False))
    assert summary.set_dir.name.startswith("cells-kauto-")
    components, info = read_fit(summary.set_dir, "class-0")
    assert [k for k, _ in info["curve"]] == [2, 3] and info["solver"] == "NMF"
    assert info["k"] == len(components) == 2  # two points: the first K
    assert info["curve"][0][1] > info["curve"][1][1]
    cs = open_concepts(run)
    assert cs.info["k"] is None and cs.info["k_max"] == 8 and set(cs.concepts["k"]) == {2}


def test_negative_share_by_hand(opened, hand_net, hand_root):
    """The share of the layer's activation mass the positive part drops: Σ|min(A, 0)| / Σ|A| over a group's images."""
    cs, _ = opened
    for group in GROUPS:
        images = sorted(cs.images[cs.images["group"] == group]["image"].unique())
        layers = [hand_layer(hand_net, hand_root / "data", image) for image in images]
        expected = sum(np.abs(np.minimum(a, 0)).sum() for a in layers) / sum(np.abs(a).sum() for a in layers)
        got = cs.concepts[cs.concepts["group"] == group]["negative_share"]
        assert 0.1 < expected < 0.9  # both parts matter here
        np.testing.assert_allclose(got, expected, rtol=1e-4)


def test_estimate_seconds_writes_nothing_and_refuses_what_find_refuses(hand_root, hand_net, other_net):
    from iba_core.concepts.discover import estimate_seconds

    before = sorted(p.name for p in (hand_root / "run").iterdir())
    seconds = estimate_seconds(hand_net, hand_root / "run", ConceptSettings(k=K))
    assert np.isfinite(seconds) and seconds > 0  # a figure, not a timing test
    assert sorted(p.name for p in (hand_root / "run").iterdir()) == before
    with pytest.raises(UserError, match="Concepts need the run's own network"):
        estimate_seconds(other_net, hand_root / "run")
