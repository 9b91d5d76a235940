
import numpy as np
import pytest

from iba_core.errors import UserError
from iba_core.image_folders import list_items
from iba_core.labels import read_label_file
from iba_core.metrics.results import (
    ResultsWriter,
    done_keys,
    markdown_table,
    merge_results,
    rank_files,
    rank_path,
    read_records,
    table_path,
)
from iba_core.ranks import shard
from metric_helpers import write_images


def rec(image, method="m", setting="s", **kw):
    return {"metric": "degradation", "image": image, "method": method, "setting": setting, **kw}


def test_writer_appends_flushes_and_survives_a_cut_line(tmp_path):
    out = tmp_path / "r.jsonl"
    with ResultsWriter(out) as w:
        w.write(rec("a", value=np.float32(0.5), arr=np.arange(3), bad=float("nan")))
        assert len(out.read_text().splitlines()) == 1  # on disk before close
    with out.open("a") as fh:
        fh.write('{"metric": "degradation", "image": "b", "meth')  # killed mid-write
    assert [r["image"] for r in read_records(out)] == ["a"]
    with ResultsWriter(out) as w:
        w.write(rec("c"))
    records = read_records(out)
    assert [r["image"] for r in records] == ["a", "c"]
    assert records[0]["value"] == 0.5 and records[0]["arr"] == [0, 1, 2] and records[0]["bad"] is None
    assert done_keys(out) == {("degradation", "a", "m", "s"), ("degradation", "c", "m", "s")}
    with pytest.raises(ValueError):
        ResultsWriter(tmp_path / "x.jsonl").write({"image": "a"})


def test_rank_files_merge_and_shards(tmp_path):
    out = tmp_path / "results.jsonl"
    assert rank_path(out, 1).name == "results.rank1.jsonl" and table_path(out).name == "results.table.md"
    for r, images in ((0, ["a", "c"]), (1, ["b", "a"])):
        with ResultsWriter(rank_path(out, r)) as w:
            for i in images:
                w.write(rec(i))
    assert len(rank_files(out)) == 2
    merged = merge_results(out)
    assert sorted(r["image"] for r in merged) == ["a", "b", "c"]
    assert len(out.read_text().splitlines()) == 3
    assert shard(list(range(7)), 1, 3) == [1, 4]


def test_markdown_table():
    text = markdown_table(["Method", "x"], [["A", 0.12345], ["Bee", None]])
    assert text.splitlines()[0].startswith("| Method") and "0.123" in text and "–" in text


def test_labels_from_index_folders_wnid_mappings_and_label_files(tmp_path):
    write_images(tmp_path / "285", 1)
    write_images(tmp_path / "n01440764", 1)
    write_images(tmp_path / "loose", 2)
    (tmp_path / "labels.csv").write_text("# image or wnid, class\nn01440764,0\nloose/img01.png,tabby\n")
    def class_index(name: str) -> int:  # as a network's: an unknown class name is the user's mistake (a UserError)
        if name.isdigit():
            return int(name)
        if name != "tabby":
            raise UserError(f"No class is named {name!r}.")
        return 281

    items = list_items(tmp_path, class_index=class_index)
    labels = {i.key: i.label for i in items}
    assert labels == {"285/img00.png": 285, "n01440764/img00.png": 0, "loose/img00.png": None,
                      "loose/img01.png": 281}
    assert [i.key for i in list_items(tmp_path, limit=2)] == ["285/img00.png", "loose/img00.png"]
    synsets = tmp_path / "LOC_synset_mapping.txt"
    synsets.write_text("n01440764 tench, Tinca tinca\nn01443537 goldfish, Carassius auratus\n")
    assert read_label_file(synsets).wnids == {"n01440764": 0, "n01443537": 1}
    with pytest.raises(FileNotFoundError):
        list_items(tmp_path, labels_file=tmp_path / "missing.txt")
