"""Readout training data: folder labels (the shared resolver of iba_core.labels) and seeded crops."""
import json
from pathlib import Path

import pytest
import torch

from readout_helpers import tiny_folder
from iba_core.labels import LabelResolver, read_class_map
from iba_core.readout import DataError, ImageFolderDataset, folder_labels

CATEGORIES = [f"class {i}" for i in range(998)] + ["tabby", "crane"]


def _files(root, names):
    return [Path(root) / n for n in names]


def test_labels_from_index_and_name_folders(tmp_path):
    files = _files(tmp_path, ["7/a.jpg", "tabby/b.png", "Tabby/c.png", "loose.jpg", "crane/deep/d.png"])
    labels, how = folder_labels(tmp_path, files, CATEGORIES)
    assert labels == [7, 998, 998, -1, 999]
    assert "top-1" in how
    labels, _ = folder_labels(tmp_path, files, CATEGORIES, mode="top1")
    assert labels == [-1] * 5
    assert folder_labels(tmp_path, _files(tmp_path, ["a.jpg"]), CATEGORIES)[0] == [-1]
    with pytest.raises(DataError, match="Cannot tell the class of folder 'dogs'"):
        folder_labels(tmp_path, _files(tmp_path, ["dogs/a.jpg"]), CATEGORIES)
    with pytest.raises(DataError, match="Cannot tell the class of folder '1000'.*out of range"):
        folder_labels(tmp_path, _files(tmp_path, ["1000/a.jpg"]), CATEGORIES)
    with pytest.raises(DataError, match="No class folders"):
        folder_labels(tmp_path, _files(tmp_path, ["a.jpg"]), CATEGORIES, mode="folders")


def test_labels_from_wordnet_folders(tmp_path):
    files = _files(tmp_path, ["n01440764/a.jpg", "n02123045/b.jpg"])
    # tench is not in this made-up class list; tabby is (ImageNet's names for n02123045: "tabby, tabby cat").
    with pytest.raises(DataError, match="n01440764.*not an ImageNet-1k class"):
        folder_labels(tmp_path, files, CATEGORIES)
    txt = tmp_path / "LOC_synset_mapping.txt"
    txt.write_text("n01440764 tench, Tinca tinca\nn01443537 goldfish\nn02123045 tabby, tabby cat\n")
    assert folder_labels(tmp_path, files, CATEGORIES, class_map=txt)[0] == [0, 2]
    js = tmp_path / "imagenet_class_index.json"
    js.write_text(json.dumps({"0": ["n01440764", "tench"], "281": ["n02123045", "tabby"]}))
    assert folder_labels(tmp_path, files, CATEGORIES, class_map=js)[0] == [0, 281]
    # a wnid the map leaves out falls back to the network's class list, as everywhere
    assert folder_labels(tmp_path, files, CATEGORIES, class_map=_write(tmp_path / "one.txt", "n01440764\n"))[0] == [
        0, 998]
    assert folder_labels(tmp_path, _files(tmp_path, ["n01440764/a.jpg", "7/b.jpg"]), CATEGORIES, class_map=txt)[0] == [
        0, 7]
    with pytest.raises(DataError, match="ambiguous"):
        folder_labels(tmp_path, _files(tmp_path, ["tabby/a.jpg"]), CATEGORIES[:-1] + ["tabby"])


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_class_maps_and_the_resolver(tmp_path):
    assert read_class_map(_write(tmp_path / "m.csv", "# wnid,index\nn01440764,5\nn02123045,281\n")) == {
        "n01440764": 5, "n02123045": 281}
    with pytest.raises(DataError, match="does not list WordNet ids"):
        read_class_map(_write(tmp_path / "bad.txt", "tench\ngoldfish\n"))
    with pytest.raises(DataError, match="imagenet_class_index.json-style"):
        read_class_map(_write(tmp_path / "bad.json", "[1, 2]"))
    with pytest.raises(DataError, match="Cannot read the class map"):
        read_class_map(tmp_path / "missing.txt")
    resolve = LabelResolver(CATEGORIES, {"n02123045": 281})
    assert resolve("12") == 12 and resolve(" TABBY ") == 998 and resolve("n02123045") == 281
    assert resolve("tab") == 998  # a part of a name that fits one class, as everywhere (resolve_class)
    assert resolve.get("n01440764") is None and resolve.get("class") is None  # unknown wnid; many classes fit
    assert LabelResolver().get("285") == 285 and LabelResolver().get("tabby") is None


def test_folder_dataset_crops_are_fixed_per_seed_epoch_and_index(offline_model, tmp_path):
    folder = tiny_folder(tmp_path / "imgs", 2)
    (folder / "broken.png").write_bytes(b"not an image")
    ds = ImageFolderDataset(folder, offline_model.preprocess, offline_model.categories, seed=1)
    assert len(ds) == 3 and ds.labels == [-1, -1, -1]
    good = [i for i, f in enumerate(ds.files) if f.name != "broken.png"][0]
    x0, y0 = ds[good]
    assert x0.shape == (3, 224, 224) and y0 == -1
    assert torch.equal(ds[good][0], x0)
    ds.set_epoch(1)
    assert not torch.equal(ds[good][0], x0)
    with pytest.warns(UserWarning, match="unreadable"):
        xb, _ = ds[[f.name for f in ds.files].index("broken.png")]  # falls through to the next readable image
    assert xb.shape == (3, 224, 224)
    with pytest.raises(DataError, match="Image folder not found"):
        ImageFolderDataset(tmp_path / "nowhere", offline_model.preprocess, offline_model.categories)
