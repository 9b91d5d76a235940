"""Readout training: labels, data, resume after an interruption, the CLI and a 2-process torchrun."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from iba_core.readout import ReadoutCheckpointError, ReadoutBottleneck, export_for_inference, load_checkpoint
from iba_core.readout_training import (
    DataError,
    ImageFolderDataset,
    TrainConfig,
    folder_labels,
    train_readout,
)

ROOT = Path(__file__).resolve().parents[1]
CATEGORIES = [f"class {i}" for i in range(998)] + ["tabby", "crane"]


def _files(root, names):
    return [Path(root) / n for n in names]


# ---- labels -----------------------------------------------------------------------------------


def test_labels_from_index_and_name_folders(tmp_path):
    files = _files(tmp_path, ["7/a.jpg", "tabby/b.png", "Tabby/c.png", "loose.jpg"])
    labels, how = folder_labels(tmp_path, files, CATEGORIES)
    assert labels == [7, 998, 998, -1]
    assert "top-1" in how
    labels, _ = folder_labels(tmp_path, files, CATEGORIES, mode="top1")
    assert labels == [-1] * 4
    assert folder_labels(tmp_path, _files(tmp_path, ["a.jpg"]), CATEGORIES)[0] == [-1]
    with pytest.raises(DataError, match="Cannot tell the class of folder 'dogs'"):
        folder_labels(tmp_path, _files(tmp_path, ["dogs/a.jpg"]), CATEGORIES)
    with pytest.raises(DataError, match="No class folders"):
        folder_labels(tmp_path, _files(tmp_path, ["a.jpg"]), CATEGORIES, mode="folders")


def test_labels_from_wordnet_folders(tmp_path):
    files = _files(tmp_path, ["n01440764/a.jpg", "n02123045/b.jpg"])
    with pytest.raises(DataError, match="no offline wnid"):
        folder_labels(tmp_path, files, CATEGORIES)
    txt = tmp_path / "LOC_synset_mapping.txt"
    txt.write_text("n01440764 tench, Tinca tinca\nn01443537 goldfish\nn02123045 tabby, tabby cat\n")
    assert folder_labels(tmp_path, files, CATEGORIES, class_map=txt)[0] == [0, 2]
    js = tmp_path / "imagenet_class_index.json"
    js.write_text(json.dumps({"0": ["n01440764", "tench"], "281": ["n02123045", "tabby"]}))
    assert folder_labels(tmp_path, files, CATEGORIES, class_map=js)[0] == [0, 281]
    # a full ILSVRC tree: sorted wnids are the class indices
    wnids = [f"n{10000000 + 7 * i:08d}" for i in range(1000)]
    labels, how = folder_labels(tmp_path, _files(tmp_path, [f"{w}/x.jpg" for w in reversed(wnids)]), CATEGORIES)
    assert labels == list(range(999, -1, -1)) and "sorted" in how
    with pytest.raises(DataError, match="ambiguous"):
        folder_labels(tmp_path, _files(tmp_path, ["tabby/a.jpg"]), CATEGORIES[:-1] + ["tabby"])


def _tiny_folder(root: Path, n: int = 4) -> Path:
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        arr = (rng.random((48, 64, 3)) * 60).astype(np.uint8)
        arr[8 + 4 * i : 30, 10 : 40 + 4 * i] = (200, 120 + 20 * i, 40)  # a coloured block to look at
        Image.fromarray(arr).save(root / f"img{i}.png")
    return root


def test_folder_dataset_crops_are_fixed_per_seed_epoch_and_index(offline_model, tmp_path):
    folder = _tiny_folder(tmp_path / "imgs", 2)
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


# ---- training, checkpoints, resume ---------------------------------------------------------------


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return _tiny_folder(tmp_path_factory.mktemp("train") / "imgs", 4)


def _cfg(folder, out, **kw) -> TrainConfig:
    base = dict(images=str(folder), batch_size=2, epochs=1, lr=1e-3, stats_n=4, out=str(out), log_every=1)
    return TrainConfig(**{**base, **kw})


def _state(path):
    ck = load_checkpoint(path)
    return ck["state_dict"], ck["training"]


def _assert_same_tensors(a, b):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _assert_same_tensors(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same_tensors(x, y)
    else:
        assert a == b


def test_interrupted_then_resumed_run_equals_an_uninterrupted_one(folder, offline_model, tmp_path, monkeypatch):
    straight = train_readout(_cfg(folder, tmp_path / "a"), loaded=offline_model, progress=False)
    assert straight["global_step"] == 2 and straight["samples_seen"] == 4
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "history.json", "preview_epoch000.png", "preview_epoch001.png", "readout_epoch001.pt", "readout_last.pt"]

    # Interrupt a second, identical run after the first of its two steps.
    calls = {"n": 0}
    original = ReadoutBottleneck.forward

    def flaky(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ReadoutBottleneck, "forward", flaky)
    with pytest.raises(KeyboardInterrupt):
        train_readout(_cfg(folder, tmp_path / "b"), loaded=offline_model, progress=False)
    monkeypatch.setattr(ReadoutBottleneck, "forward", original)
    _, tr = _state(tmp_path / "b" / "readout_last.pt")
    assert (tr["epoch"], tr["step"], tr["global_step"], tr["complete"]) == (0, 1, 1, False)
    assert set(tr["rng"]) == {"torch", "cuda", "numpy", "python"} and tr["optimizer"]["state"]

    resumed = train_readout(TrainConfig(), resume=tmp_path / "b" / "readout_last.pt", loaded=offline_model,
                            progress=False)
    assert resumed["weights_sha256"] == straight["weights_sha256"]
    sa, ta = _state(tmp_path / "a" / "readout_epoch001.pt")
    sb, tb = _state(tmp_path / "b" / "readout_epoch001.pt")
    _assert_same_tensors(sa, sb)
    _assert_same_tensors(ta["optimizer"], tb["optimizer"])
    assert (tb["epoch"], tb["step"], tb["global_step"]) == (ta["epoch"], ta["step"], ta["global_step"]) == (1, 0, 2)
    assert ta["history"][0]["loss"] == pytest.approx(tb["history"][0]["loss"], rel=1e-6)

    # A finished run continues with more epochs; an exported (inference-only) checkpoint cannot resume.
    more = train_readout(TrainConfig(epochs=2, max_steps=1), resume=tmp_path / "a" / "readout_epoch001.pt",
                         loaded=offline_model, progress=False)
    assert more["global_step"] == 3 and more["history"][-1]["epoch"] == 2
    assert (tmp_path / "a" / "readout_epoch002.pt").is_file()
    exported = export_for_inference(tmp_path / "a" / "readout_epoch002.pt", tmp_path / "x.pt")
    with pytest.raises(ReadoutCheckpointError, match="cannot be resumed"):
        train_readout(TrainConfig(), resume=exported, progress=False)


def test_cli_trains_and_reports(folder, tmp_path, capsys):
    from iba_core.cli_readout import main

    rc = main(["train-readout", "--images", str(folder), "--epochs", "1", "--batch-size", "4", "--lr", "1e-3",
               "--stats-n", "4", "--beta-k", "10", "--out", str(tmp_path / "o"), "--workers", "0", "--no-progress"])
    assert rc == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["rank"] == 0 and line["world_size"] == 1 and line["global_step"] == 1
    assert line["last_epoch"]["epoch"] == 1 and np.isfinite(line["last_epoch"]["loss"])
    assert (tmp_path / "o" / "readout_epoch001.pt").is_file() and (tmp_path / "o" / "preview_epoch001.png").is_file()
    assert main(["train-readout", "--images", str(tmp_path / "nowhere"), "--out", str(tmp_path / "p")]) == 1
    assert "Image folder not found" in capsys.readouterr().err
    assert main(["train-readout", "--out", str(tmp_path / "p")]) == 1
    assert "--images" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_torchrun_two_processes_agree(folder, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = tmp_path / "ddp"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), "-m", "iba_core.cli_readout", "train-readout",
           "--images", str(folder), "--epochs", "1", "--batch-size", "2", "--lr", "1e-3", "--stats-n", "4",
           "--out", str(out), "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.startswith("{")]
    assert sorted(l["rank"] for l in lines) == [0, 1]
    assert all(l["world_size"] == 2 and l["samples_seen"] == 2 and l["global_step"] == 1 for l in lines)
    assert lines[0]["weights_sha256"] == lines[1]["weights_sha256"]
    # only rank 0 wrote, once per file
    assert sorted(p.name for p in out.iterdir()) == ["history.json", "preview_epoch000.png", "preview_epoch001.png",
                                                     "readout_epoch001.pt", "readout_last.pt"]
    ck = load_checkpoint(out / "readout_epoch001.pt")
    assert ck["training"]["world_size"] == 2 and ck["training"]["history"][0]["samples"] == 4
