"""The concept set on disk (concepts/store.py), as the run's own store is tested: a second call skips finished groups
and changes nothing, a deleted group is redone alone, a damaged part, map file or fit is left out by
`open_concepts` with one sentence and healed (moved to damaged/, redone with equal numbers) by the next call, a
changed K or layer is a new set beside the old, and no file the set names can lie outside it."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from concept_fixtures import K
from iba_core.concepts import ConceptSettings, find_concepts, list_sets, open_concepts
from iba_core.concepts.store import DAMAGED, FITS, GROUPS, IMAGE_TABLE, MAPS, PARTS, SUMS, TABLE
from iba_core.runs.store import RunFolderError

GROUPS_ALL = ["class-0", "class-1", "all"]
NUMBERS = ["bits_share", "p_full", "p_without", "p_only", "effect", "area", "peak_spread", "images_using"]


def the_set(run: Path) -> Path:
    (name,) = list_sets(run)
    return run / "concepts" / name


def files_of(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file below `folder` with its size and change time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")
            if p.is_file()}


def flip(path: Path, at: int = 40) -> None:
    """Damage a file: flip the bytes of a stretch in its middle."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    for i in range(middle, min(middle + at, len(data))):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def numbers(run: Path, group: str) -> pd.DataFrame:
    table = open_concepts(run).concepts
    return table[table["group"] == group].sort_values("fit_index")[NUMBERS].reset_index(drop=True)


def test_a_second_call_skips_every_group_and_changes_nothing(hand_copy, hand_net):
    before = files_of(hand_copy)
    summary = find_concepts(hand_net, hand_copy, ConceptSettings(k=K))
    assert summary.done == [] and sorted(summary.skipped) == sorted(GROUPS_ALL) and summary.damaged == []
    assert files_of(hand_copy) == before


def test_the_derived_tables_match_the_committed_units(hand_concepts):
    cs = open_concepts(hand_concepts)
    on_disk = pd.read_parquet(cs.path / TABLE)
    pd.testing.assert_frame_equal(on_disk, cs.concepts, check_dtype=False)
    assert len(pd.read_parquet(cs.path / IMAGE_TABLE)) == len(cs.images)
    info = json.loads((cs.path / "concepts.json").read_text())
    assert info["k"] == K and info["layer"] == "cells" and info["method"] == "iba_10" and info == cs.info


def test_a_deleted_group_is_redone_alone(hand_copy, hand_net):
    folder = the_set(hand_copy)
    expected = numbers(hand_copy, "class-0")
    others = {k: v for k, v in files_of(folder).items() if "class-1" in k or k.startswith(("fits/all", "parts/all",
                                                                                                  "groups/all"))}
    (folder / GROUPS / "class-0.parquet").unlink()
    (folder / GROUPS / f"class-0{SUMS}").unlink()
    assert sorted(open_concepts(hand_copy).concepts["group"].unique()) == ["all", "class-1"]
    summary = find_concepts(hand_net, hand_copy, ConceptSettings(k=K))
    assert summary.done == ["class-0"] and sorted(summary.skipped) == ["all", "class-1"]
    pd.testing.assert_frame_equal(numbers(hand_copy, "class-0"), expected, rtol=1e-4)
    after = files_of(folder)
    assert {k: after[k] for k in others} == others  # the other groups' units untouched


@pytest.mark.parametrize("damage, unit", [
    (lambda f: flip(f / PARTS / "class-0-r0.parquet"), "parts/class-0-r0"),
    (lambda f: flip(f / MAPS / "class-0-r0.npz"), "parts/class-0-r0"),  # a map file is part of its part's unit
    (lambda f: flip(f / FITS / "class-0.npz"), "fits/class-0"),
    (lambda f: (f / PARTS / "class-0-r0.parquet").unlink(), "parts/class-0-r0"),
    (lambda f: (f / GROUPS / "class-0.parquet").write_bytes(b"not a parquet file"), "groups/class-0"),
])
def test_damage_is_left_out_then_healed_with_equal_numbers(hand_copy, hand_net, damage, unit):
    folder = the_set(hand_copy)
    expected = numbers(hand_copy, "class-0")
    expected_images = open_concepts(hand_copy).images.query("group == 'class-0'").reset_index(drop=True)
    damage(folder)
    before = files_of(hand_copy)
    cs = open_concepts(hand_copy)
    assert files_of(hand_copy) == before  # opening only reads
    assert "class-0" not in set(cs.concepts["group"]) and "class-0" not in set(cs.images["group"])
    assert sorted(cs.concepts["group"].unique()) == ["all", "class-1"]
    assert cs.missing is not None and unit in cs.missing and "class-0" in cs.missing and "redoes" in cs.missing
    assert len(cs.missing.splitlines()) == 1

    summary = find_concepts(hand_net, hand_copy, ConceptSettings(k=K))
    assert unit in summary.damaged and summary.done == ["class-0"]
    assert sorted(summary.skipped) == ["all", "class-1"]
    moved = folder / DAMAGED / unit.replace("/", "-")
    assert (moved / "note.txt").is_file() and (moved / f"{unit.split('/')[1]}{SUMS}").is_file()
    healed = open_concepts(hand_copy)
    assert healed.missing is None
    pd.testing.assert_frame_equal(numbers(hand_copy, "class-0"), expected, rtol=1e-4)
    images = healed.images.query("group == 'class-0'").reset_index(drop=True)
    pd.testing.assert_frame_equal(images.drop(columns=["map_file", "map_index"]),
                                  expected_images.drop(columns=["map_file", "map_index"]), rtol=1e-4)
    assert healed.concept_map(images.iloc[0]).shape == (8, 8)
    # a third call finds nothing to heal
    again = find_concepts(hand_net, hand_copy, ConceptSettings(k=K))
    assert again.damaged == [] and again.done == []


def test_a_changed_k_is_a_new_set_and_the_old_is_untouched(hand_copy, hand_net):
    old = the_set(hand_copy)
    before = files_of(old)
    summary = find_concepts(hand_net, hand_copy, ConceptSettings(k=3, whole_run=False))
    sets = list_sets(hand_copy)
    assert len(sets) == 2 and sets[0] == summary.set_dir.name and summary.set_dir != old
    assert sets[0].startswith("cells-k3-") and old.name.startswith(f"cells-k{K}-")
    assert files_of(old) == before
    assert set(open_concepts(hand_copy).concepts["k"]) == {3}  # the newest by default
    assert set(open_concepts(hand_copy, old.name).concepts["k"]) == {K}


def test_a_changed_layer_is_a_new_set(hand_copy, hand_net):
    old = the_set(hand_copy)
    before = files_of(old)
    summary = find_concepts(hand_net, hand_copy, ConceptSettings(k=K, layer="pool", whole_run=False))
    assert summary.set_dir.name.startswith("pool-k2-") and len(list_sets(hand_copy)) == 2
    assert files_of(old) == before
    cs = open_concepts(hand_copy, summary.set_dir.name)
    assert cs.info["layer"] == "pool" and set(cs.images["grid_h"]) == {1}


def test_other_settings_of_the_identity_make_new_sets(hand_copy, hand_net):
    first = the_set(hand_copy).name
    find_concepts(hand_net, hand_copy, ConceptSettings(k=K, seed=1, classes=(0,), whole_run=False))
    assert len(list_sets(hand_copy)) == 2 and first in list_sets(hand_copy)
    # the classes and the whole-run group are not the identity: fewer groups reuse the set
    summary = find_concepts(hand_net, hand_copy, ConceptSettings(k=K, classes=(1,), whole_run=False))
    assert summary.set_dir.name == first and summary.skipped == ["class-1"]


def rewrite_part(folder: Path, name: str, **changes) -> None:
    """Change columns of a part's rows and update its checksum file as a careful forger would."""
    path = folder / PARTS / f"{name}.parquet"
    pd.read_parquet(path).assign(**changes).to_parquet(path, index=False)
    lines = []
    for line in (folder / PARTS / f"{name}{SUMS}").read_text().splitlines():
        _, rel = line.split("  ", 1)
        lines.append(f"{hashlib.sha256((folder / rel).read_bytes()).hexdigest()}  {rel}")
    (folder / PARTS / f"{name}{SUMS}").write_text("\n".join(lines) + "\n")


def test_a_map_file_outside_the_set_is_refused(hand_copy, tmp_path):
    folder = the_set(hand_copy)
    outside = tmp_path / "x.npz"
    np.savez(outside, m0=np.ones((K, 8, 8), dtype=np.float16))
    rewrite_part(folder, "class-0-r0", map_file="../../x.npz")
    cs = open_concepts(hand_copy)  # the checksums match: the rows are read …
    row = cs.images[cs.images["group"] == "class-0"].iloc[0]
    assert row["map_file"] == "../../x.npz"
    with pytest.raises(RunFolderError, match="outside itself"):  # … but the file they name is not
        cs.concept_map(row)
    for name in (str(outside), "../" * 8 + "etc/passwd"):
        with pytest.raises(RunFolderError, match="outside itself"):
            cs.concept_map(pd.concat([row.drop("map_file"), pd.Series({"map_file": name})]))


def test_a_checksum_file_naming_a_file_outside_is_damage(hand_copy, tmp_path):
    folder = the_set(hand_copy)
    (tmp_path / "x.parquet").write_bytes(b"")
    digest = hashlib.sha256(b"").hexdigest()
    (folder / PARTS / f"class-1-r0{SUMS}").write_text(f"{digest}  ../../../x.parquet\n")
    cs = open_concepts(hand_copy)
    assert "class-1" not in set(cs.concepts["group"]) and "outside" in cs.missing


def test_a_set_name_outside_the_run_is_refused(hand_copy):
    for name in ("../..", "../../..", "/etc"):
        with pytest.raises(RunFolderError):
            open_concepts(hand_copy, name)


def test_a_run_without_concepts_or_without_that_set_is_one_sentence(hand_root, hand_copy):
    with pytest.raises(RunFolderError, match="has no concepts yet"):
        open_concepts(hand_root / "run")
    assert list_sets(hand_root / "run") == []
    with pytest.raises(RunFolderError, match="no concept set 'cells-k9-00000000'"):
        open_concepts(hand_copy, "cells-k9-00000000")


def test_a_damaged_concepts_json_is_one_sentence_then_rewritten(hand_copy, hand_net):
    folder = the_set(hand_copy)
    expected = numbers(hand_copy, "class-1")
    (folder / "concepts.json").write_bytes(b"\xff\xfe{not json")
    assert list_sets(hand_copy) == []
    with pytest.raises(RunFolderError, match="has no concepts yet"):
        open_concepts(hand_copy)
    with pytest.raises(RunFolderError, match="is damaged: its concepts.json cannot be read"):
        open_concepts(hand_copy, folder.name)  # was a UnicodeDecodeError
    summary = find_concepts(hand_net, hand_copy, ConceptSettings(k=K))
    assert summary.set_dir == folder and sorted(summary.skipped) == sorted(GROUPS_ALL)  # its units were intact
    assert list_sets(hand_copy) == [folder.name]  # was left hidden for good
    assert open_concepts(hand_copy).info["k"] == K
    pd.testing.assert_frame_equal(numbers(hand_copy, "class-1"), expected, rtol=1e-4)
