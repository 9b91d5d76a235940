"""Concepts under torchrun (#41 item 4): two processes share the measure pass (rank 0 fits each group, every rank
measures its share of the images, rank 0 writes the group's table) and give the concepts of one process."""
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runs"))
from run_fixtures import make_shortcut_run  # noqa: E402

from iba_core.cli import main  # noqa: E402
from iba_core.concepts import open_concepts  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_give_the_concepts_of_one(tmp_path, capsys):
    run_dir, _ = make_shortcut_run(tmp_path / "made", per_class=6)
    card = tmp_path / "made" / "card" / "tiny.toml"
    shutil.copytree(run_dir, tmp_path / "two")
    args = ["--model", str(card), "--trust-code", "--per-class", "3", "--batch", "2"]
    assert main(["concepts", str(run_dir), *args]) == 0  # one process: this one
    capsys.readouterr()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), "-m", "iba_core", "concepts", str(tmp_path / "two"), *args]
    two = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert two.returncode == 0, two.stderr[-3000:]
    summaries = [json.loads(l) for l in two.stdout.splitlines() if l.startswith('{"concepts"')]
    assert len(summaries) == 2  # each rank says what it did
    a, b = open_concepts(run_dir), open_concepts(tmp_path / "two")
    assert a.path.name == b.path.name  # the same identity
    parts = sorted(p.name for p in (b.path / "parts").glob("*.parquet"))
    assert parts == ["all-r0.parquet", "all-r1.parquet", "class-0-r0.parquet", "class-0-r1.parquet",
                     "class-1-r0.parquet", "class-1-r1.parquet"]
    exact = ["group", "concept", "fit_index", "images", "images_using", "flagged", "top_images"]
    pd.testing.assert_frame_equal(a.concepts[exact], b.concepts[exact])
    close = ["bits_share", "p_full", "p_without", "p_only", "effect", "area", "peak_spread"]
    np.testing.assert_allclose(a.concepts[close].to_numpy(float), b.concepts[close].to_numpy(float),
                               rtol=1e-4, atol=1e-6)
    key = ["group", "image", "concept"]
    left, right = (c.images.sort_values(key).reset_index(drop=True) for c in (a, b))
    pd.testing.assert_frame_equal(left[key], right[key])
    np.testing.assert_allclose(left[["presence", "bits", "p_without"]].to_numpy(float),
                               right[["presence", "bits", "p_without"]].to_numpy(float), rtol=1e-4, atol=1e-6)
