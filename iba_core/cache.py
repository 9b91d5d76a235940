"""One way to keep things on disk: safe names, atomic writes, a checksum, the identity of what made them.

Every cached file (feature statistics, PatternAttribution's patterns, the precision memo, …) goes through
here. A file that is missing loads as None; one that is truncated, corrupted, of another format version,
has a wrong checksum, an identity that differs from what the caller expects, or fails the caller's own
check, is reported with a warning, removed, and loads as None too, so the caller rebuilds it.

Arrays live in an .npz (loaded with allow_pickle=False); the metadata — the format version, the checksum
and the caller's identity `meta` — is JSON in a 0-d string entry `__meta__` of the same file.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import socket
import time
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

#: Bump when the layout of cached files changes: older files are then rebuilt.
FORMAT_VERSION = 1

_META_KEY = "__meta__"
_SLUG_CHARS = 40


def safe_name(*parts: str) -> str:
    """A file-name-safe, collision-free name for a key such as ("card:/x/y.toml", "layer3").

    A readable slug (letters, digits, `.`, `-`, `_`) plus a short hash of the exact parts, so keys
    that slug alike ("a:b" and "a/b") still get distinct names.
    """
    key = "\x1f".join(str(p) for p in parts)
    # each part slugged on its own and cut from the left (a path's file name says more than its folders)
    slugs = [re.sub(r"[^A-Za-z0-9.-]+", "_", str(p))[-_SLUG_CHARS:].strip("._-") for p in parts]
    slug = "__".join(s for s in slugs if s)[-3 * _SLUG_CHARS:].lstrip("._-")
    digest = hashlib.sha256(key.encode()).hexdigest()[:12]
    return f"{slug or 'item'}__{digest}"


def cache_file(kind: str, *parts: str, suffix: str) -> Path:
    """`settings.cache_dir() / kind / (safe_name(*parts) + suffix)`."""
    from .settings import cache_dir

    return cache_dir() / kind / (safe_name(*parts) + suffix)


def checksum(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over each array's name, dtype, shape and bytes, in sorted key order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


#: A temp file (or a run's claim) written on another host counts as abandoned after this many seconds without a
#: change: its writer's pid cannot be checked from here, and a live writer finishes a file in seconds (a folder
#: run refreshes its claims after every chunk).
STALE_SECONDS = 3600.0
_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.(?:(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-)?[0-9a-f]{12}\.tmp$")


def host_tag(host: str | None = None) -> str:
    """8 hex digits naming a host (default: this one), for file names that say who wrote them."""
    return hashlib.sha256((socket.gethostname() if host is None else host).encode()).hexdigest()[:8]


def pid_alive(pid: int) -> bool:
    """Whether a process with this id runs on this host (another user's counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:  # e.g. Windows' EINVAL: cannot tell, so count it as alive and let age decide
        return True
    return True


def abandoned(host: str | None, pid: int | None, mtime: float, now: float | None = None) -> bool:
    """Whether the writer of a temp file or claim is gone: its pid is dead on this host (host is a `host_tag`), or
    it has not changed for STALE_SECONDS (also on this host: after a kill -9 its pid may be reused by another
    process, and live writers refresh their claims after every chunk)."""
    stale = (time.time() if now is None else now) - mtime > STALE_SECONDS
    if host == host_tag() and pid is not None:
        return stale or not pid_alive(pid)
    return stale


def _new_temp_file(path: Path) -> Path:
    """An empty file beside `path` under a name no other writer uses (it names this host and process, so a
    stale one can be told from a live writer's), with the mode a plain open() gives (0o666 less the umask,
    applied by the kernel; mkstemp's would be private, 0600)."""
    for _ in range(100):
        tmp = path.parent / f".{path.name}.{host_tag()}-{os.getpid()}-{secrets.token_hex(6)}.tmp"
        try:
            os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"No free temporary name beside {path}.")


def _fsync_path(path: Path, directory: bool = False) -> None:
    """Flush a file's (or a folder's entries') data to the disk, so a power cut cannot undo a finished write."""
    if directory and os.name == "nt":  # Windows cannot open a folder to flush it; NTFS journals renames
        return
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, write: Callable[[Path], None]) -> None:
    """Write through a uniquely named temp file in the same folder, flushed to the disk, then os.replace and
    flush the folder: readers never see half a file, two writers never share a temp file, and after a power
    cut the name holds the old file or the whole new one. `write(tmp)` fills the temp file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_temp_file(path)
    try:
        write(tmp)
        _fsync_path(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_path(path.parent, directory=True)


def create_new(path: str | os.PathLike, text: str) -> bool:
    """Create `path` holding `text` only where no file has that name yet: True when this call made it, False when
    one existed. The text goes to a temp file first, which is then hard-linked to `path` (a link fails on an existing
    name, as O_CREAT | O_EXCL does), so `path` never exists empty: a writer killed mid-write leaves a temp file for
    `remove_stale_temps`, not an unreadable file that others must wait out. Where the file system has no hard links,
    falls back to O_CREAT | O_EXCL."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _new_temp_file(path)
    try:
        tmp.write_text(text, encoding="utf-8")
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except OSError:  # no hard links here (some network or FAT file systems)
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            return True
    finally:
        tmp.unlink(missing_ok=True)


def remove_stale_temps(folder: str | os.PathLike) -> list[Path]:
    """Remove the temp files of `write_atomic` in `folder` whose writer is gone (`abandoned`: killed, say, with
    kill -9); a live writer's are kept. Returns those removed."""
    folder = Path(folder)
    removed = []
    for tmp in folder.glob(".*.tmp") if folder.is_dir() else ():
        match = _TEMP_NAME.match(tmp.name)
        if match is None:
            continue
        try:
            mtime = tmp.stat().st_mtime
        except FileNotFoundError:  # its writer committed or cleaned it meanwhile
            continue
        pid = int(match["pid"]) if match["pid"] else None
        if abandoned(match["host"], pid, mtime):
            tmp.unlink(missing_ok=True)
            removed.append(tmp)
    return removed


def _reject(path: Path, reason: str) -> None:
    warnings.warn(f"The cached file {path} is unusable ({reason}); it is removed and will be rebuilt.", stacklevel=3)
    try:
        path.unlink()
    except OSError:
        pass  # a read-only cache: the caller rebuilds in memory all the same


def save_arrays(path: str | os.PathLike, arrays: dict[str, np.ndarray], meta: dict, *, compress: bool = True) -> None:
    """Save `arrays` and the identity `meta` (JSON-able) atomically with the format version and a checksum.

    compress=False for large float arrays that barely compress (VGG-16's 553 MB of patterns: zlib would
    add about a minute to the save and seconds to every load).
    """
    path = Path(path)
    arrays = {name: np.asarray(a) for name, a in arrays.items()}
    if _META_KEY in arrays:
        raise ValueError(f"{_META_KEY} is reserved for the file's metadata.")
    if any(a.dtype.hasobject for a in arrays.values()):
        raise ValueError("Cached arrays must hold numbers or text, not Python objects (they load without pickle).")
    header = {"version": FORMAT_VERSION, "checksum": checksum(arrays), "meta": meta}
    text = json.dumps(header, sort_keys=True)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:
            (np.savez_compressed if compress else np.savez)(f, **arrays, **{_META_KEY: np.array(text)})

    write_atomic(path, write)


def load_arrays(
    path: str | os.PathLike,
    *,
    expect: dict | None = None,
    check: Callable[[dict, dict], str | None] | None = None,
) -> tuple[dict[str, np.ndarray], dict] | None:
    """(arrays, meta) saved by `save_arrays`, or None when missing or unusable (warned about and removed).

    expect: identity entries the file's meta must have (equal values); check(arrays, meta) returns a
    reason the contents are wrong, or None.
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as data:  # our handle: closed on any error
            if _META_KEY not in data.files:
                _reject(path, "no metadata: an older format")
                return None
            header = json.loads(str(data[_META_KEY][()]))
            arrays = {name: data[name] for name in data.files if name != _META_KEY}
    except Exception as err:  # noqa: BLE001 - any damage (bad zip, bad CRC, bad JSON, a short read) means rebuild
        _reject(path, f"unreadable: {type(err).__name__}")
        return None
    problem = _header_problem(header, "meta", lambda: checksum(arrays))
    if problem:
        _reject(path, problem)
        return None
    meta = header["meta"]
    if expect:
        differ = sorted(k for k, v in expect.items() if meta.get(k) != _jsonable(v))
        if differ:
            _reject(path, f"made for another {', '.join(differ)}")
            return None
    if check is not None:
        reason = check(arrays, meta)
        if reason:
            _reject(path, reason)
            return None
    return arrays, meta


def read_meta(path: str | os.PathLike) -> dict | None:
    """The identity `meta` of a file saved by `save_arrays`, read without its arrays and unchecked (to pick
    files by identity before loading them); None when the file is missing or has no readable metadata."""
    try:
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as data:  # our handle: closed on any error
            header = json.loads(str(data[_META_KEY][()]))
        return header["meta"] if isinstance(header.get("meta"), dict) else None
    except Exception:  # noqa: BLE001 - unreadable: load_arrays reports and removes it when it is asked for
        return None


def copy_in(source: str | os.PathLike, path: str | os.PathLike) -> None:
    """Copy a file (shipped data, say) into the cache atomically; the cached copy is the one `load_arrays`
    may remove when it finds it damaged, never the original."""
    data = Path(source).read_bytes()
    write_atomic(Path(path), lambda tmp: tmp.write_bytes(data))


def save_json(path: str | os.PathLike, obj: dict) -> None:
    """Save a small dict as JSON atomically, with the format version and a checksum."""
    path = Path(path)
    body = json.dumps(obj, sort_keys=True)
    text = json.dumps({"version": FORMAT_VERSION, "checksum": _text_sum(body), "data": obj}, indent=1, sort_keys=True)
    write_atomic(path, lambda tmp: tmp.write_text(text))


def load_json(path: str | os.PathLike) -> dict | None:
    """The dict saved by `save_json`, or None when missing or unusable (warned about and removed)."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        header = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        _reject(path, f"unreadable: {type(err).__name__}")
        return None
    problem = _header_problem(header, "data", lambda: _text_sum(json.dumps(header["data"], sort_keys=True)))
    if problem:
        _reject(path, problem)
        return None
    return header["data"]


def _header_problem(header: object, body: str, contents_sum: Callable[[], str]) -> str | None:
    """Why a file's header (its dict `body`, format version and checksum) makes it unusable, or None."""
    if not isinstance(header, dict) or not isinstance(header.get(body), dict):
        return f"its {body} is malformed"
    if header.get("version") != FORMAT_VERSION:
        return f"format version {header.get('version')!r}, expected {FORMAT_VERSION}"
    if header.get("checksum") != contents_sum():
        return "its checksum does not match its contents"
    return None


def _text_sum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _jsonable(value: object) -> object:
    """`value` as it reads back from JSON (tuples become lists), so expect= compares like with like."""
    return json.loads(json.dumps(value))
