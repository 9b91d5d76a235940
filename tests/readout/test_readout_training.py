"""Readout training: resume after an interruption, the CLI and a 2-process torchrun."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from iba_core.readout import (
    ReadoutBottleneck,
    ReadoutCheckpointError,
    TrainConfig,
    export_for_inference,
    load_checkpoint,
    train_readout,
)

ROOT = Path(__file__).resolve().parents[2]


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


def test_resume_keeps_the_checkpoints_settings_unless_overridable():
    saved = TrainConfig(epochs=1, lr=1e-3)
    with pytest.warns(UserWarning, match="keeps the checkpoint's lr=0.001"):
        cfg = TrainConfig(epochs=3, lr=0.5).resumed(saved)
    assert (cfg.epochs, cfg.lr) == (3, 1e-3)
    assert TrainConfig(epochs=5).resumed(TrainConfig(epochs=1), overrides=[]).epochs == 1


def test_interrupted_then_resumed_run_equals_an_uninterrupted_one(folder, offline_model, tmp_path, monkeypatch):
    straight = train_readout(_cfg(folder, tmp_path / "a"), network=offline_model, progress=False)
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
        train_readout(_cfg(folder, tmp_path / "b"), network=offline_model, progress=False)
    monkeypatch.setattr(ReadoutBottleneck, "forward", original)
    _, tr = _state(tmp_path / "b" / "readout_last.pt")
    assert (tr["epoch"], tr["step"], tr["global_step"], tr["complete"]) == (0, 1, 1, False)
    assert set(tr["rng"]) == {"torch", "cuda", "numpy", "python"} and tr["optimizer"]["state"]

    resumed = train_readout(TrainConfig(), resume=tmp_path / "b" / "readout_last.pt", network=offline_model,
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
                         network=offline_model, progress=False)
    assert more["global_step"] == 3 and more["history"][-1]["epoch"] == 2
    assert (tmp_path / "a" / "readout_epoch002.pt").is_file()
    exported = export_for_inference(tmp_path / "a" / "readout_epoch002.pt", tmp_path / "x.pt")
    with pytest.raises(ReadoutCheckpointError, match="cannot be resumed"):
        train_readout(TrainConfig(), resume=exported, progress=False)


def test_cli_trains_and_reports(folder, tmp_path, capsys):
    from iba_core.cli import main

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
           "--master_port", str(_free_port()), "-m", "iba_core", "train-readout",
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
