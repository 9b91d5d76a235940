"""The shortcut test (issue #22): a small CNN trained in the test on images whose class "marked" is told only by a
red square in the top-left corner; a folder run ranks the marked images first by border share, and the clusters
of similar maps put them in a cluster of their own."""
import pytest
import torch

from iba_core import open_run
from iba_core.runs import class_mean_map, map_clusters
from run_fixtures import make_shortcut_run, shortcut_tensors, train_shortcut_net


@pytest.fixture(scope="module")
def shortcut_run(tmp_path_factory):
    model = train_shortcut_net()  # as make_shortcut_run trains it (seeded)
    x, y = shortcut_tensors(64, seed=5)  # fresh images
    with torch.no_grad():
        assert (model(x).argmax(1) == y).float().mean() == 1.0  # it learned the task (and so the mark)
    run_dir, keys = make_shortcut_run(tmp_path_factory.mktemp("shortcut"))  # the paper's settings otherwise
    return open_run(run_dir), keys


def test_the_marked_images_rank_first_by_border_share(shortcut_run):
    run, keys = shortcut_run
    table = run.table
    assert (table["correct"]).all() and (table["target"] == table["label"]).all()
    ranked = table.sort_values("border_share", ascending=False)["image"].tolist()
    marked = {k for k, m in keys.items() if m}
    assert set(ranked[:len(marked)]) == marked
    shares = table.set_index("image")["border_share"]
    # the marked images' bits lie mostly in the border (its area is 1 − 52²/64² = 34 % of the image)
    assert shares[list(marked)].min() > 0.4 > 0.2 > shares.drop(list(marked)).max()
    mean = class_mean_map(run, "iba_10", 0)  # class "marked": its mean map sits in the top-left corner
    assert mean[:16, :16].sum() > 0.4 * mean.sum()  # 6 % of the image


def test_the_clusters_put_the_marked_images_apart(shortcut_run):
    run, keys = shortcut_run
    marked = {k for k, m in keys.items() if m}
    groups = map_clusters(run, "iba_10")  # every map of the run, both classes
    assert groups.k >= 2
    clusters = {c: set(groups.members(c)["image"]) for c in range(groups.k)}
    assert marked in clusters.values()
    corner = next(c for c, members in clusters.items() if members == marked)
    assert groups.mean_thumbnail(corner)[:7, :7].sum() > 0.4  # the top-left 16 × 16 px
    # the marked images' maps are alike: each is close to its class's mean map
    distances = run.table.set_index("image")["distance_to_class_mean"]
    assert distances[list(marked)].max() < 0.05
