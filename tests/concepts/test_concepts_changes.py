"""A run that changes under its concepts (issue #41's review): images that cannot be read leave their group out
(the others go on) and are tried again; a group made from other images is made again; the top-level tables heal;
the streamed fit takes any K; a kept figure is not read from noise; K above the channels is refused."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from concept_fixtures import K
from iba_core.concepts import ConceptSettings, find_concepts, open_concepts
from iba_core.concepts import factorise, group_table, measures
from iba_core.concepts.store import IMAGE_TABLE, TABLE
from iba_core.errors import UserError


def _moved_source(run, tmp_path):
    """A copy of the run's image folder that the run now reads (run.json's source rewritten to it)."""
    info = json.loads((run / "run.json").read_text())
    data = tmp_path / "data"
    shutil.copytree(info["source"], data)
    (run / "run.json").write_text(json.dumps({**info, "source": str(data)}))
    return data


def test_a_class_whose_images_are_gone_is_left_out_and_tried_again(hand_root, hand_net, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(hand_root / "run", run)
    data = _moved_source(run, tmp_path)
    table = pd.read_parquet(run / "results.parquet")
    gone = data / table.loc[table["target"] == 0, "image"].iloc[0].split("/")[0]  # class 0's folder
    shutil.move(gone, tmp_path / "aside")
    summary = find_concepts(hand_net, run, ConceptSettings(k=K))
    assert list(summary.failed) == ["class-0"] and summary.failed["class-0"].startswith(
        "None of the images of class-0 could be read from the run's image folder (the first: ")
    assert summary.done == ["class-1", "all"] and summary.unreadable
    assert set(open_concepts(run).concepts["group"]) == {"class-1", "all"}
    shutil.move(tmp_path / "aside", gone)  # the files are back: class 0, and "all" (which missed them), again
    again = find_concepts(hand_net, run, ConceptSettings(k=K))
    assert again.done == ["class-0", "all"] and again.skipped == ["class-1"] and not again.failed
    found = open_concepts(run)
    assert set(found.concepts["group"]) == {"class-0", "class-1", "all"}
    assert found.concepts.query("group == 'all'")["images"].iloc[0] == found.images["image"].nunique()


def test_a_group_made_from_other_images_is_made_again(hand_copy, hand_net):
    before = open_concepts(hand_copy).concepts.query("group == 'all'")["images"].iloc[0]
    table = pd.read_parquet(hand_copy / "results.parquet")
    # the run loses an image (a later run's table without it): its groups are stale
    first = table["image"].iloc[0]
    (hand_copy / "results.parquet").unlink()
    (hand_copy / "results.sha256").unlink()
    for part in (hand_copy / "parts").glob("*.parquet"):
        frame = pd.read_parquet(part)
        if first in set(frame["image"]):
            kept = frame[frame["image"] != first]
            kept.to_parquet(part, index=False)
            sums = part.with_suffix(".sha256")
            sums.unlink()  # a part written before checksums: read whole
    summary = find_concepts(hand_net, hand_copy, ConceptSettings(k=K))
    assert "all" in summary.done and summary.skipped == [g for g in summary.skipped if g != "all"]
    after = open_concepts(hand_copy)
    assert after.concepts.query("group == 'all'")["images"].iloc[0] == before - 1
    assert first not in set(after.images["image"])


def test_the_top_level_tables_heal(hand_copy, hand_net):
    folder = open_concepts(hand_copy).path
    (folder / TABLE).write_bytes((folder / TABLE).read_bytes()[:100])
    (folder / IMAGE_TABLE).unlink()
    summary = find_concepts(hand_net, hand_copy, ConceptSettings(k=K))
    assert not summary.done  # nothing to redo …
    cs = open_concepts(hand_copy)
    pd.testing.assert_frame_equal(pd.read_parquet(folder / TABLE), cs.concepts)  # … yet both tables are whole again
    assert len(pd.read_parquet(folder / IMAGE_TABLE)) == len(cs.images)


def test_k_above_the_channels_is_refused(hand_root, hand_net, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(hand_root / "run", run)
    with pytest.raises(UserError, match="has 3 channels, so it holds at most 3 concepts, not 4"):
        find_concepts(hand_net, run, ConceptSettings(k=4))
    assert not (run / "concepts").exists()


@pytest.mark.parametrize("k", [12, 40])
def test_the_streamed_fit_takes_small_batches_and_any_k(k):
    """Batches of 8 rows (a batch of images with few locations each) and K above the channels: no error, K capped at
    the channels (16)."""
    rng = np.random.default_rng(0)
    rows = np.maximum(rng.normal(size=(4000, 16)), 0).astype(np.float32)
    f = factorise.stream((rows[i:i + 8] for i in range(0, len(rows), 8)), k)
    assert f.k == min(k, 16) and (f.components >= 0).all() and np.isfinite(f.error)


def test_kept_is_not_read_from_noise():
    """Where p(target) with nothing kept is within KEPT_MIN_GAIN of p(target), kept is NaN (not 150 %)."""
    rows = pd.DataFrame({"p_full": [0.99999], "p_none": [0.99998], "p_only": [0.999995]})
    assert np.isnan(group_table._kept(rows))
    rows = pd.DataFrame({"p_full": [0.9], "p_none": [0.5], "p_only": [0.8]})
    assert group_table._kept(rows) == pytest.approx(0.75)
    assert measures.KEPT_MIN_GAIN == 0.05
