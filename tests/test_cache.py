"""cache.py: safe names, atomic writes, and every damaged file warned about, removed and rebuilt."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

from iba_core import cache


@pytest.fixture
def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"mean": rng.normal(size=(4, 3, 3)).astype(np.float32), "n": np.int64(96),
            "names": np.array(["a", "b"])}


META = {"network": "card:/a/b.toml", "layer": "conv2", "samples": 96}


@pytest.fixture
def saved(tmp_path, arrays):
    path = tmp_path / "stats" / "x.npz"
    cache.save_arrays(path, arrays, META)
    return path


def _assert_rebuilt(path, result) -> None:
    assert result is None
    assert not path.exists(), "an unusable file must be removed so the caller rebuilds it"


def test_round_trip_keeps_arrays_and_identity(saved, arrays):
    loaded, meta = cache.load_arrays(saved, expect={"network": "card:/a/b.toml", "layer": "conv2"})
    assert meta == META
    assert set(loaded) == set(arrays)
    for name in arrays:
        np.testing.assert_array_equal(loaded[name], arrays[name])
        assert loaded[name].dtype == np.asarray(arrays[name]).dtype


def test_missing_file_is_none_without_warning(tmp_path, recwarn):
    assert cache.load_arrays(tmp_path / "nothing.npz") is None
    assert cache.load_json(tmp_path / "nothing.json") is None
    assert not recwarn.list


def test_truncated_file_is_removed(saved):
    data = saved.read_bytes()
    saved.write_bytes(data[: len(data) // 2])
    with pytest.warns(UserWarning, match="unreadable"):
        result = cache.load_arrays(saved)
    _assert_rebuilt(saved, result)


def test_flipped_bytes_never_load_wrong_contents(saved, arrays):
    """A byte flipped anywhere either leaves the contents intact (a zip timestamp, say) or is caught."""
    original = saved.read_bytes()
    caught = 0
    for i in range(0, len(original), max(1, len(original) // 40)):
        data = bytearray(original)
        data[i] ^= 0xFF
        saved.write_bytes(bytes(data))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            result = cache.load_arrays(saved)
        if result is None:
            caught += 1
            assert not saved.exists() and any(saved.name in str(w.message) for w in seen)
        else:
            for name in arrays:
                np.testing.assert_array_equal(result[0][name], arrays[name])
    assert caught >= 20


def _rewrite(path, arrays: dict, header: dict) -> None:
    """Write an .npz by hand, bypassing save_arrays (a file from another version or a tampered one)."""
    with open(path, "wb") as f:
        np.savez(f, **arrays, __meta__=np.array(json.dumps(header)))


def test_wrong_version_is_rebuilt(saved, arrays):
    _rewrite(saved, arrays, {"version": cache.FORMAT_VERSION + 1, "checksum": cache.checksum(arrays), "meta": META})
    with pytest.warns(UserWarning, match="format version"):
        result = cache.load_arrays(saved)
    _assert_rebuilt(saved, result)


def test_changed_contents_fail_the_checksum(saved, arrays):
    header = {"version": cache.FORMAT_VERSION, "checksum": cache.checksum(arrays), "meta": META}
    _rewrite(saved, {**arrays, "mean": arrays["mean"] * 10}, header)
    with pytest.warns(UserWarning, match="checksum"):
        result = cache.load_arrays(saved)
    _assert_rebuilt(saved, result)


def test_file_without_metadata_is_an_older_format(saved, arrays):
    with open(saved, "wb") as f:
        np.savez(f, **arrays)
    with pytest.warns(UserWarning, match="older format"):
        result = cache.load_arrays(saved)
    _assert_rebuilt(saved, result)


def test_other_identity_is_rebuilt(saved):
    with pytest.warns(UserWarning, match="another layer"):
        result = cache.load_arrays(saved, expect={"layer": "conv1", "network": "card:/a/b.toml"})
    _assert_rebuilt(saved, result)


def test_failed_check_is_rebuilt_with_its_reason(saved):
    def check(arrays, meta):
        return "σ is zero everywhere" if arrays["mean"].size else None

    with pytest.warns(UserWarning, match="σ is zero everywhere"):
        result = cache.load_arrays(saved, check=check)
    _assert_rebuilt(saved, result)


def test_passing_check_keeps_the_file(saved):
    seen = []
    assert cache.load_arrays(saved, check=lambda a, m: seen.append(m) or None) is not None
    assert seen == [META] and saved.exists()


def test_save_leaves_no_temp_files_and_replaces(tmp_path, arrays):
    path = tmp_path / "a.npz"
    cache.save_arrays(path, arrays, {"v": 1})
    cache.save_arrays(path, {**arrays, "mean": arrays["mean"] + 1}, {"v": 2})
    loaded, meta = cache.load_arrays(path)
    assert meta == {"v": 2}
    np.testing.assert_allclose(loaded["mean"], arrays["mean"] + 1, rtol=1e-6)
    assert [p.name for p in tmp_path.iterdir()] == ["a.npz"]


def test_failed_write_keeps_the_old_file_and_no_temp(tmp_path, arrays, monkeypatch):
    path = tmp_path / "a.npz"
    cache.save_arrays(path, arrays, {"v": 1})
    with pytest.raises(ValueError, match="not Python objects"):
        cache.save_arrays(path, {"bad": np.array([object()], dtype=object)}, {"v": 2})

    def crash(f, **_arrays):
        f.write(b"PK half a file")
        raise OSError("disk full")

    monkeypatch.setattr(cache.np, "savez_compressed", crash)
    with pytest.raises(OSError, match="disk full"):
        cache.save_arrays(path, arrays, {"v": 3})
    assert [p.name for p in tmp_path.iterdir()] == ["a.npz"]
    assert cache.load_arrays(path)[1] == {"v": 1}


def test_concurrent_writers_use_distinct_temp_names(tmp_path, arrays, monkeypatch):
    """Two writers of the same file never share a temp file; the result is one whole file."""
    path = tmp_path / "same.npz"
    temps: list[str] = []
    real_replace = os.replace
    barrier = threading.Barrier(4)

    def replace(src, dst):
        temps.append(str(src))
        barrier.wait(timeout=10)  # all four temp files exist at once before any is moved
        real_replace(src, dst)

    monkeypatch.setattr(cache.os, "replace", replace)
    threads = [threading.Thread(target=cache.save_arrays, args=(path, arrays, {"writer": i})) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(temps)) == 4
    assert all(os.path.dirname(t) == str(tmp_path) for t in temps)  # same folder: os.replace is atomic
    assert cache.load_arrays(path)[1]["writer"] in range(4)
    assert [p.name for p in tmp_path.iterdir()] == ["same.npz"]


def test_an_atomic_write_reaches_the_disk_before_its_name_and_the_folder_after(tmp_path, monkeypatch):
    """The temp file is flushed before the rename (a power cut then leaves the old file or the whole new one, never
    an empty one under the name), the folder after it (so the rename itself survives)."""
    events: list[tuple[str, str]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", str(src)))
        real_replace(src, dst)

    monkeypatch.setattr(cache.os, "fsync", fsync)
    monkeypatch.setattr(cache.os, "replace", replace)
    path = tmp_path / "sub" / "x.json"
    cache.save_json(path, {"a": 1})
    temp = events[1][1]
    assert events == [("fsync", temp), ("replace", temp), ("fsync", str(path.parent))]
    assert os.path.basename(temp).startswith(".x.json.") and cache.load_json(path) == {"a": 1}


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_stale_temp_files_are_removed_and_live_writers_kept(tmp_path):
    me = cache.host_tag()
    dead = tmp_path / f".a.npz.{me}-{_dead_pid()}-{'1' * 12}.tmp"  # killed with kill -9 on this host
    live = tmp_path / f".b.npz.{me}-{os.getpid()}-{'2' * 12}.tmp"
    fresh_elsewhere = tmp_path / f".c.npz.{'f' * 8}-1-{'3' * 12}.tmp"
    old_elsewhere = tmp_path / f".d.npz.{'f' * 8}-1-{'4' * 12}.tmp"
    old_unnamed = tmp_path / f".e.npz.{'5' * 12}.tmp"  # written before temp names said who wrote them
    other = tmp_path / ".notes.tmp"  # not a temp file of write_atomic
    for path in (dead, live, fresh_elsewhere, old_elsewhere, old_unnamed, other):
        path.write_bytes(b"half")
    for path in (old_elsewhere, old_unnamed, other):
        os.utime(path, (time.time() - cache.STALE_SECONDS - 10,) * 2)
    assert sorted(cache.remove_stale_temps(tmp_path)) == sorted([dead, old_elsewhere, old_unnamed])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (live, fresh_elsewhere, other))
    assert cache.remove_stale_temps(tmp_path / "missing") == []


def test_create_new_makes_a_whole_file_once(tmp_path, monkeypatch):
    path = tmp_path / "claims" / "a.json"
    seen_at_link = []
    link = os.link

    def watched(src, dst, **kwargs):  # the name appears only once its text is complete
        seen_at_link.append((Path(src).read_text(), Path(dst).exists()))
        return link(src, dst, **kwargs)

    monkeypatch.setattr(os, "link", watched)
    assert cache.create_new(path, '{"pid": 1}')
    assert seen_at_link == [('{"pid": 1}', False)]
    assert not cache.create_new(path, '{"pid": 2}')  # taken: the first text stays
    assert path.read_text() == '{"pid": 1}' and sorted(p.name for p in path.parent.iterdir()) == ["a.json"]

    def no_links(src, dst, **kwargs):
        raise PermissionError(1, "Operation not permitted")  # a file system without hard links

    monkeypatch.setattr(os, "link", no_links)
    other = tmp_path / "claims" / "b.json"
    assert cache.create_new(other, "b") and not cache.create_new(other, "c")
    assert other.read_text() == "b" and sorted(p.name for p in path.parent.iterdir()) == ["a.json", "b.json"]


def test_safe_names_are_file_safe_and_distinct():
    keys = [("card:/a/b.toml",), ("torchvision:resnet18",), ("card:/a/b_toml",), ("card_/a/b.toml",),
            ("card:/a", "b.toml"), ("card:/a/b", ".toml"), ("torchvision:resnet18", "layer4"),
            ("torchvision", "resnet18"), ("x" * 500,), ("../../etc/passwd",), ("",)]
    names = [cache.safe_name(*k) for k in keys]
    assert len(set(names)) == len(names)
    for name in names:
        assert name and "/" not in name and "\\" not in name and ":" not in name
        assert not name.startswith(".") and len(name) <= 140
    assert cache.safe_name("torchvision:resnet18") == cache.safe_name("torchvision:resnet18")
    assert "resnet18" in cache.safe_name("torchvision:resnet18")


def test_cache_file_lives_under_the_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("IBA_CACHE_DIR", str(tmp_path))
    path = cache.cache_file("stats", "card:/a/b.toml", "conv2", suffix=".npz")
    assert path.parent == tmp_path / "stats"
    assert path.name == cache.safe_name("card:/a/b.toml", "conv2") + ".npz"


def test_json_round_trip_and_damage(tmp_path):
    path = tmp_path / "memo.json"
    cache.save_json(path, {"k": "bf16", "n": [1, 2]})
    assert cache.load_json(path) == {"k": "bf16", "n": [1, 2]}
    for garbage in ("{not json", "[1, 2]", json.dumps({"version": cache.FORMAT_VERSION, "checksum": "0",
                                                         "data": {"k": "fp16"}})):
        path.write_text(garbage)
        with pytest.warns(UserWarning, match="memo.json"):
            assert cache.load_json(path) is None
        assert not path.exists()


def test_load_refuses_pickles(tmp_path):
    """Arrays load with allow_pickle=False: an object array in a cache file is refused, never unpickled."""
    path = tmp_path / "p.npz"
    with open(path, "wb") as f:
        np.savez(f, x=np.array([{"a": 1}], dtype=object), __meta__=np.array("{}"))
    assert zipfile.is_zipfile(path)
    with pytest.warns(UserWarning, match="unreadable"):
        assert cache.load_arrays(path) is None
    assert not path.exists()
