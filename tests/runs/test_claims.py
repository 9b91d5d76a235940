"""One writer per image of a run folder (runs/claims.py): claims are exclusive, a dead or silent writer's claim is
taken over, a live writer's images are left to it, and two real processes into one folder compute each image once."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from iba_core.cache import STALE_SECONDS
from iba_core.methods import get_method
from iba_core.runs import FolderSettings, list_images, run_folder
from iba_core.runs.claims import CLAIMS, Claims
from iba_core.runs.store import TABLE_FILE, read_parts
from run_fixtures import write_noise_images

ROOT = Path(__file__).resolve().parents[2]


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _claim_as(claims: Claims, key: str, pid: int, host: str, age: float = 0.0) -> Path:
    """A claim on `key` written as another writer would (pid, host), `age` seconds old."""
    path = claims.path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": pid, "host": host, "started": time.time() - age, "nonce": f"n{pid}",
                                "image": key}))
    if age:
        os.utime(path, (time.time() - age,) * 2)
    return path


def test_a_claim_is_exclusive_until_released(tmp_path):
    first, second = Claims(tmp_path), Claims(tmp_path)
    assert first.take("a/1.png") and first.take("a/1.png")  # holding it already
    assert not second.take("a/1.png")  # a live writer (this very process) holds it
    assert second.take("a/2.png")
    first.release(["a/1.png"])
    assert second.take("a/1.png")
    second.release_all()
    assert not list((tmp_path / CLAIMS).iterdir())


def test_stale_claims_are_taken_over_and_live_ones_kept(tmp_path):
    mine = Claims(tmp_path)
    here, there = socket.gethostname(), "another-host.example"
    _claim_as(mine, "dead", _dead_pid(), here)
    _claim_as(mine, "silent", 1, there, age=STALE_SECONDS + 60)  # no refresh for longer than the limit
    _claim_as(mine, "busy", 1, there, age=60)
    _claim_as(mine, "alive", os.getppid(), here)
    assert mine.take("dead") and mine.take("silent")
    assert not mine.take("busy") and not mine.take("alive")
    assert json.loads(mine.path("dead").read_text())["pid"] == os.getpid()  # now this process's
    other = Claims(tmp_path)
    mine.path("dead").write_text(json.dumps({**other.me, "image": "dead"}))  # as if taken over by another
    mine.release(["dead"])
    assert mine.path("dead").exists()  # not this process's any more: left to its holder


def test_a_claim_file_of_garbage_is_judged_by_its_age_alone(tmp_path):
    """Claims are run files too (issue #40): a pid past any process id, brackets nested 100,000 deep or a file far
    larger than a claim neither crash the writer nor block the image once it is old."""
    mine = Claims(tmp_path)
    here = socket.gethostname()
    huge = _claim_as(mine, "huge pid", 10**30, here, age=60)  # os.kill(10**30, 0) raises OverflowError
    deep = _claim_as(mine, "deep", 1, here)
    deep.write_text("[" * 100_000 + "]" * 100_000)
    big = _claim_as(mine, "big", 1, here)
    big.write_text(json.dumps({"pid": 1, "host": here, "image": "big", "pad": "x" * 100_000}))
    for path in (deep, big):
        os.utime(path, (time.time() - 60,) * 2)
    assert not mine.take("huge pid") and not mine.take("deep") and not mine.take("big")  # young: left alone
    for path in (huge, deep, big):
        os.utime(path, (time.time() - STALE_SECONDS - 60,) * 2)
    assert mine.take("huge pid") and mine.take("deep") and mine.take("big")  # silent too long: taken over


# A writer killed at the instant its claim would appear (os.link is where a claim comes into being).
KILLED_WHILE_CLAIMING = """
import os, signal, sys
from iba_core.runs.claims import Claims
os.link = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
Claims(sys.argv[1]).take("cat/001.jpg")
"""


def test_a_writer_killed_while_claiming_leaves_no_claim_that_blocks_the_image(tmp_path):
    """A claim used to be created empty and then filled: a kill -9 in between left a file nobody could read, which
    held the image for STALE_SECONDS (an hour), and a resumed run waited for it. Now the claim's text is complete
    before the claim exists; what the dead writer leaves is a temp file that healing the run removes."""
    from iba_core.runs.checks import heal

    run = tmp_path / "run"
    dead = subprocess.run([sys.executable, "-c", KILLED_WHILE_CLAIMING, str(run)], cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert dead.returncode == -9, dead.stderr[-2000:]
    left = list((run / CLAIMS).iterdir())
    assert len(left) == 1 and left[0].name.endswith(".tmp"), left  # the filled temp file, no claim
    assert json.loads(left[0].read_text())["image"] == "cat/001.jpg"
    heal(run)
    assert not list((run / CLAIMS).iterdir())
    claims = Claims(run)
    assert claims.take("cat/001.jpg")  # at once, not after an hour
    assert json.loads(claims.path("cat/001.jpg").read_text())["pid"] == os.getpid()


def test_a_run_takes_the_free_images_first_and_the_held_ones_when_their_writer_is_gone(tiny_net, tmp_path):
    folder = tmp_path / "images"
    write_noise_images(folder, 6)
    root, items = list_images(folder, class_index=tiny_net.class_index)
    out = tmp_path / "run"
    claims = Claims(out)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])  # a live writer
    try:
        here = socket.gethostname()
        held = {items[0].key: _claim_as(claims, items[0].key, holder.pid, here),
                items[3].key: _claim_as(claims, items[3].key, 1, "another-host.example", age=5)}
        _claim_as(claims, items[1].key, _dead_pid(), here)  # killed: taken over at once

        def progress(done: int, total: int, label: str) -> None:
            if done == 4:  # every free image done: now the live writer dies, the other host's claim ages
                holder.kill()
                holder.wait()
                os.utime(held[items[3].key], (time.time() - STALE_SECONDS - 1,) * 2)

        summary = run_folder(tiny_net, items, [get_method("gradient")], out, FolderSettings(batch_images=1),
                             root=root, progress=progress)
    finally:
        holder.kill()
        holder.wait()
    rows = read_parts(out)
    assert summary.rows == 6 and sorted(rows["image"]) == sorted(i.key for i in items)  # each image once
    assert set(rows["image"][-2:]) == {items[0].key, items[3].key}  # the held ones last, once let go
    assert not any((out / CLAIMS).iterdir())  # every claim released


def folder_run_command(tiny_card, tmp_path, images: int, *options: str) -> tuple[list[str], dict, Path]:
    """(command, environment, run folder) of `attribute FOLDER` on `images` noise images with the tiny card, one
    image a batch (so two processes interleave image by image), one thread each."""
    folder = tmp_path / "images"
    write_noise_images(folder, images)
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "iba_core", "attribute", str(folder), "--model", str(tiny_card), "--trust-code",
           *options, "--batch-images", "1", "--no-progress", "--out", str(out)]
    return cmd, env, out


def test_two_processes_into_one_run_folder_compute_each_image_once(tiny_card, tmp_path):
    cmd, env, out = folder_run_command(tiny_card, tmp_path, 24, "--methods", "iba_10", "--steps", "2", "--batch",
                                       "2", "--precision", "fp32", "--n", "16")
    # statistics once, before both start (otherwise both would estimate them: not the point here)
    warm = subprocess.run([*cmd[:-1], str(tmp_path / "warm"), "--limit", "1"], env=env, capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert warm.returncode == 0, warm.stderr[-3000:]
    both = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
            for _ in range(2)]
    outputs = [p.communicate(timeout=600) for p in both]
    for p, (stdout, stderr) in zip(both, outputs):
        assert p.returncode == 0, stderr[-3000:]
    lines = [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in outputs]
    rows = read_parts(out)
    assert len(rows) == 24 and rows["image"].is_unique  # 24 images, 24 rows: none computed twice
    assert sum(line["new_rows"] for line in lines) == 24, [line["new_rows"] for line in lines]
    table = pd.read_parquet(out / TABLE_FILE)
    assert len(table) == 24 and table["error"].isna().all()
    assert not any((out / CLAIMS).iterdir())


def test_a_run_killed_mid_work_leaves_claims_that_its_resume_takes_over(tiny_card, tmp_path):
    cmd, env, out = folder_run_command(tiny_card, tmp_path, 12, "--methods", "saliency")
    first = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    deadline = time.monotonic() + 300
    while not (out / CLAIMS).is_dir() or not any((out / CLAIMS).iterdir()):  # mid-work: it holds an image
        assert first.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.05)
    first.kill()  # SIGKILL: no finally, no flush; its claims stay behind
    first.wait()
    left_behind = list((out / CLAIMS).iterdir())
    assert left_behind
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert again.returncode == 0, again.stderr[-3000:]
    rows = read_parts(out)
    assert len(rows) == 12 and rows["image"].is_unique  # the dead run's images taken over at once, none twice
    assert not any((out / CLAIMS).iterdir()) and not list(out.rglob(".*.tmp"))
