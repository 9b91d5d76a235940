"""iba_core.labels: one resolver, so readout training and evaluate / attribute FOLDER label a folder alike."""
from __future__ import annotations

from pathlib import Path

import pytest

from iba_core.image_folders import list_items
from iba_core.labels import DataError, LabelResolver, folder_labels, imagenet_synsets, is_imagenet_1k
from iba_core.networks.torchvision_common import imagenet_categories

#: ImageNet-1k classes of an ImageNet-style folder holding only a few of them: wnid → its ImageNet-1k index.
FEW = {"n01440764": 0, "n02123045": 281, "n03028079": 497, "n04592741": 908}


@pytest.fixture(scope="module")
def imagenet() -> list[str]:
    if not imagenet_synsets():
        pytest.skip("timm's ImageNet-1k synset list is not installed: WordNet ids cannot be told here")
    return imagenet_categories()


def _tree(root: Path, folders) -> list[Path]:
    files = []
    for name in folders:
        (root / name).mkdir(parents=True, exist_ok=True)
        files.append(root / name / "img.png")
        files[-1].write_bytes(b"")  # listing only: the images are never opened
    return files


def test_the_imagenet_list_is_the_ilsvrc_order(imagenet):
    synsets = imagenet_synsets()
    assert len(synsets) == 1000 and sorted(synsets) == [w for w, _ in sorted(synsets.items(), key=lambda kv: kv[1][0])]
    assert synsets["n02123045"] == (281, ("tabby", "tabby cat"))
    assert is_imagenet_1k(imagenet) and not is_imagenet_1k([f"class {i}" for i in range(1000)])


def test_a_few_imagenet_classes_get_their_imagenet_indices_in_training_and_evaluation(tmp_path, imagenet):
    """The same ImageNet-style folder: one set of labels for train-readout and for evaluate / attribute FOLDER,
    the classes' ImageNet-1k indices (the sorted order of the four folders present would say 0, 1, 2, 3)."""
    files = _tree(tmp_path, FEW)
    training, how = folder_labels(tmp_path, files, imagenet)
    evaluation = {item.key.split("/")[0]: item.label for item in list_items(tmp_path, categories=imagenet)}
    assert training == list(FEW.values()) and evaluation == FEW and "WordNet id" in how
    assert LabelResolver(imagenet)("n03028079") == 497  # a folder name, a label file's entry: one resolver


def test_a_network_of_some_imagenet_classes_finds_them_by_name_and_leaves_the_rest_unlabelled(tmp_path, imagenet):
    mine = ["goldfish", "tabby", "church"]  # names as ImageNet lists them, in this network's own order
    files = _tree(tmp_path, ["n02123045", "n03028079", "n01440764"])
    labels = {item.key.split("/")[0]: item.label for item in list_items(tmp_path, categories=mine)}
    assert labels == {"n02123045": 1, "n03028079": 2, "n01440764": None}  # tench: not a class of this network
    assert folder_labels(tmp_path, files[:2], mine)[0] == [1, 2]
    with pytest.raises(DataError, match="n01440764"):  # training refuses a class folder it cannot tell
        folder_labels(tmp_path, files, mine)
    assert folder_labels(tmp_path, files, mine, mode="top1")[0] == [-1, -1, -1]


def test_a_label_file_in_the_folder_is_read_by_both(tmp_path):
    mine = ["a", "b", "c"]
    files = _tree(tmp_path, ["n09999991", "n09999992"])  # no ImageNet class: only the file can tell
    (tmp_path / "labels.csv").write_text("n09999991,2\nn09999992,0\n")
    assert folder_labels(tmp_path, files, mine)[0] == [2, 0]
    assert [item.label for item in list_items(tmp_path, categories=mine)] == [2, 0]
    (tmp_path / "labels.csv").unlink()
    assert [item.label for item in list_items(tmp_path, categories=mine)] == [None, None]
