"""The run folder on disk (runs/store.py): every path it names stays inside it, a damaged part or chunk is left
out by open_run with one sentence and redone exactly by the next resume, opening only reads, stale temp files go."""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from iba_core import open_run
from iba_core.cache import host_tag
from iba_core.methods import get_method
from iba_core.runs import FolderSettings, RunFolderError, finish_run, list_images, run_folder
from iba_core.runs.store import DAMAGED, MAPS, PARTS, SUMS_SUFFIX, TABLE_FILE, part_names, read_parts
from run_fixtures import write_noise_images

IMAGES = 6
#: Two rows a part: three parts for six images (gradient: a map in milliseconds).
TWO_A_PART = FolderSettings(batch_images=2, part_rows=2)


@pytest.fixture
def run(tiny_net, tmp_path):
    """A finished run of six images with the gradient, in three parts; returns (run folder, images, items)."""
    folder = tmp_path / "images"
    write_noise_images(folder, IMAGES)
    root, items = list_images(folder, class_index=tiny_net.class_index)
    out = tmp_path / "run"
    run_folder(tiny_net, items, [get_method("gradient")], out, TWO_A_PART, root=root)
    finish_run(out)
    return out, root, items


def files_of(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file below `folder` with its size and change time: what opening must leave as it was."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")
            if p.is_file()}


def images_of(run_dir: Path, name: str) -> list[str]:
    return list(pd.read_parquet(run_dir / PARTS / f"{name}.parquet")["image"])


# ---- paths stay inside -----------------------------------------------------------------------------------------


def test_a_map_file_outside_the_run_is_refused(tiny_net, run, tmp_path):
    out, root, items = run
    other = tmp_path / "other"  # another run beside it, whose maps must not be read through this one
    run_folder(tiny_net, items, [get_method("gradient")], other, TWO_A_PART, root=root)
    outside = f"../other/{MAPS}/{part_names(other)[0]}.npz"
    opened = open_run(out)
    row = opened.table.iloc[0].copy()
    for name in (outside, str((other / MAPS / f"{part_names(other)[0]}.npz").resolve())):
        row["map_file"] = name
        with pytest.raises(RunFolderError, match="names a file outside itself"):
            opened.heatmap(row)
    for key in ("../../etc/passwd", "/etc/passwd", "a/../../b.png"):  # an image key that climbs out of the images
        with pytest.raises(RunFolderError, match="outside its image folder"):
            opened.image_path(pd.concat([row.drop("image"), pd.Series({"image": key})]))
    # a part whose rows point there, with checksums that match (anyone can compute them): left out, not read
    name = part_names(out)[0]
    frame = pd.read_parquet(out / PARTS / f"{name}.parquet").assign(map_file=outside)
    frame.to_parquet(out / PARTS / f"{name}.parquet", index=False)
    digest = hashlib.sha256((out / PARTS / f"{name}.parquet").read_bytes()).hexdigest()
    (out / PARTS / f"{name}{SUMS_SUFFIX}").write_text(f"{digest}  {PARTS}/{name}.parquet\n")
    opened = open_run(out)
    assert len(opened.table) == IMAGES - 2 and "another part's map file" in opened.missing
    # a map file that is a symlink to another run's
    name = part_names(out)[1]
    (out / MAPS / f"{name}.npz").unlink()
    (out / MAPS / f"{name}.npz").symlink_to((other / MAPS / f"{part_names(other)[1]}.npz").resolve())
    opened = open_run(out)
    assert len(opened.table) == IMAGES - 4 and "outside the run folder" in opened.missing


# ---- a damaged run heals ----------------------------------------------------------------------------------------


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _zero(path: Path) -> None:
    path.write_bytes(b"")


def _garble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 16] = bytes(255 - b for b in data[middle:middle + 16])  # same size, other bytes
    path.write_bytes(bytes(data))


DAMAGE = {  # what is damaged: (folder, suffix), how, whether the rows can still be named
    "truncated part": ((PARTS, ".parquet"), _truncate, False),
    "0-byte part": ((PARTS, ".parquet"), _zero, False),
    "garbled part": ((PARTS, ".parquet"), _garble, False),
    "garbled chunk": ((MAPS, ".npz"), _garble, True),
    "truncated chunk": ((MAPS, ".npz"), _truncate, True),
    "0-byte chunk": ((MAPS, ".npz"), _zero, True),
}


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_part_or_chunk_is_left_out_then_redone_exactly(tiny_net, run, kind):
    out, root, items = run
    (folder, suffix), damage, named = DAMAGE[kind]
    name = part_names(out)[1]
    lost = images_of(out, name)
    before = open_run(out).table.set_index("image")
    damage(out / folder / f"{name}{suffix}")
    untouched = files_of(out)

    opened = open_run(out)  # results.parquet is current, yet the damage is noticed
    assert sorted(opened.table["image"]) == sorted(set(before.index) - set(lost))
    assert [d.part for d in opened.damage] == [name]
    sentence = opened.missing
    assert "\n" not in sentence and sentence.endswith("the next resume of the run redoes them.")
    if named:  # the rows could be read: the sentence names their images
        assert all(image in sentence for image in lost) and "differs from its checksum" in sentence
    else:
        assert f"({name}: its rows differ from their checksum), so its rows are left out" in sentence
    for i in range(len(opened.table)):
        opened.heatmap(i)  # every row left in reads
    assert files_of(out) == untouched  # opening only reads: nothing moved, no table written

    summary = run_folder(tiny_net, items, [get_method("gradient")], out, TWO_A_PART, root=root)
    assert summary.rows == len(lost) and summary.skipped == IMAGES - len(lost)  # exactly the damaged rows
    assert len(summary.damaged) == 1 and summary.damaged[0].startswith(name)
    assert sorted(read_parts(out)["image"]) == sorted(i.key for i in items)  # each image once
    moved = out / DAMAGED / name
    assert (moved / f"{name}{suffix}").exists()
    assert "moved here from the run because" in (moved / "note.txt").read_text()
    assert name not in part_names(out)
    table = finish_run(out).set_index("image")
    assert list(table.index) == sorted(i.key for i in items) and open_run(out).missing is None
    for image in lost:  # redone to the same values
        assert table.loc[image, "p_target"] == pytest.approx(before.loc[image, "p_target"], rel=1e-4)


def test_a_part_from_before_checksums_is_checked_by_reading_it(tiny_net, run):
    out, root, items = run
    for sums in (out / PARTS).glob(f"*{SUMS_SUFFIX}"):
        sums.unlink()  # as a run written before checksums
    assert open_run(out).missing is None and len(open_run(out).table) == IMAGES
    name = part_names(out)[2]
    _garble(out / MAPS / f"{name}.npz")
    opened = open_run(out)
    assert len(opened.table) == IMAGES - 2 and all(image in opened.missing for image in images_of(out, name))


def test_a_damaged_checksum_file_costs_its_part_which_is_redone(tiny_net, run):
    out, root, items = run
    name = part_names(out)[0]
    _zero(out / PARTS / f"{name}{SUMS_SUFFIX}")
    assert len(open_run(out).table) == IMAGES - 2
    assert run_folder(tiny_net, items, [get_method("gradient")], out, TWO_A_PART, root=root).rows == 2
    assert sorted(read_parts(out)["image"]) == sorted(i.key for i in items)


def test_a_garbled_table_is_built_again_from_the_parts(run):
    out, root, items = run
    before = open_run(out).table
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(out / TABLE_FILE)  # a table that parses, names every part, and says other things
    i = table.schema.get_field_index("p_target")
    table = table.set_column(i, "p_target", pa.array([0.5] * len(table))).replace_schema_metadata(table.schema.metadata)
    pq.write_table(table, out / TABLE_FILE)
    pd.testing.assert_frame_equal(open_run(out).table, before)


def test_checksums_that_leave_out_the_map_file_cost_the_part(run):
    out, root, items = run
    name = part_names(out)[0]
    sums = out / PARTS / f"{name}{SUMS_SUFFIX}"
    sums.write_text("".join(line + "\n" for line in sums.read_text().splitlines() if PARTS in line))
    opened = open_run(out)
    assert len(opened.table) == IMAGES - 2 and "leave out its map file" in opened.missing


# ---- reading never writes; stale temp files --------------------------------------------------------------------


def test_opening_a_running_run_builds_the_table_in_memory_and_writes_nothing(tiny_net, tmp_path):
    folder = tmp_path / "images"
    write_noise_images(folder, 4)
    root, items = list_images(folder, class_index=tiny_net.class_index)
    out = tmp_path / "run"
    run_folder(tiny_net, items, [get_method("gradient")], out, TWO_A_PART, root=root)  # no finish_run yet
    before = files_of(out)
    assert len(open_run(out).table) == 4
    assert files_of(out) == before and not (out / TABLE_FILE).exists()
    finish_run(out)  # the writer's verb writes it
    assert (out / TABLE_FILE).is_file()


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_resume_removes_the_temp_files_of_dead_writers_only(tiny_net, run):
    out, root, items = run
    me = host_tag()
    dead = out / PARTS / f".part-x.parquet.{me}-{_dead_pid()}-{'a' * 12}.tmp"
    live = out / MAPS / f".part-y.npz.{me}-{os.getpid()}-{'b' * 12}.tmp"
    elsewhere = out / PARTS / f".part-z.parquet.{'0' * 8}-1-{'c' * 12}.tmp"  # another host, written just now
    old = out / f".run.json.{'d' * 12}.tmp"  # an older name without host and pid, two hours old
    for path in (dead, live, elsewhere, old):
        path.write_bytes(b"half a file")
    os.utime(old, (os.path.getmtime(old) - 7200,) * 2)
    run_folder(tiny_net, items, [get_method("gradient")], out, TWO_A_PART, root=root)
    assert not dead.exists() and not old.exists()
    assert live.exists() and elsewhere.exists()
    assert np.array_equal(np.sort(read_parts(out)["image"]), np.sort([i.key for i in items]))


def test_the_report_says_which_rows_a_damaged_part_left_out_and_which_method_made_no_map(tiny_net, run):
    """Issue #40, item 6: a part cut short left the report counting fewer rows without a word; a method whose every
    row failed is named too."""
    from iba_core.app.dataset import empty_methods_sentence
    from iba_core.app.dataset_report import report_html
    from iba_core.trust import Trust

    out, _, _ = run
    name = part_names(out)[1]
    _truncate(out / PARTS / f"{name}.parquet")
    opened = open_run(out)
    html = report_html(opened, "gradient", Trust.local()).decode("utf-8")
    assert opened.missing and f"({name}: its rows differ from their checksum)" in html and 'class="warning"' in html
    table = opened.table.copy()
    assert empty_methods_sentence(table) == ""
    table["metrics"], table["insertion_auc"] = "insertion", float("nan")  # measured, and empty for every image
    assert empty_methods_sentence(table) == ("Measured but empty for every image: insertion for gradient (its scores "
                                             "are left blank, not zero).")
    table["error"] = "boom"
    assert empty_methods_sentence(table).startswith("No map was made for gradient")


def test_the_report_shows_the_run_relative_to_the_allowed_folder(tiny_net, run, tmp_path):
    """Issue #40, item 5: a served report named the run by its absolute path on the server; a visitor sees it
    relative to the folder the owner allowed (the local user still sees the whole path)."""
    from iba_core.app.dataset_report import report_html
    from iba_core.trust import Trust, visitor_path

    out, _, _ = run
    opened = open_run(out)
    served = Trust(server_paths=(out.parent.resolve(),))
    html = report_html(opened, "gradient", served).decode("utf-8")
    assert str(out.parent.resolve()) not in html and f"{out.parent.name}/{out.name}" in html
    assert visitor_path(out, Trust.local()) == str(out)
    assert visitor_path("/somewhere/else/run", served) == "run"  # outside every allowed folder: its name only


def test_a_reports_header_names_the_layer_its_method_made_its_maps_at(tiny_net, tmp_path):
    """Issue #38, item 7: a Grad-CAM report's header named the run's bottleneck layer; each method's report names
    the layer that method used (Grad-CAM's target layer), and a method reading the whole network says so."""
    from iba_core.app.dataset_report import report_html
    from iba_core.methods.cam import cam_layer
    from iba_core.trust import Trust

    folder = tmp_path / "images"
    write_noise_images(folder, 2)
    root, items = list_images(folder, class_index=tiny_net.class_index)
    out = tmp_path / "run"
    iba = get_method("iba_10", steps=1, batch=2)
    run_folder(tiny_net, items, [iba, get_method("grad_cam"), get_method("gradient")], out, TWO_A_PART, root=root)
    finish_run(out)
    opened = open_run(out)
    bottleneck, cam = opened.info["layer"], cam_layer(tiny_net)[0]
    assert bottleneck and cam != bottleneck
    assert opened.info["methods"]["grad_cam"]["layers"] == [cam]

    def header_layer(method: str) -> str:
        html = report_html(opened, method, Trust.local()).decode("utf-8")
        return re.search(r"<tr><td>layer</td><td>(.*?)</td></tr>", html).group(1)

    assert header_layer("grad_cam") == cam
    assert header_layer("iba_10") == bottleneck
    assert header_layer("gradient") == "none (the method reads the whole network)"
