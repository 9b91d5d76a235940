"""One writer per image of a run folder: claims, so two processes writing into one RUN_DIR share the work.

    claims = Claims(run_dir)
    if claims.take("cat/001.jpg"):    # created whole, by a hard link: exactly one process wins
        ...                           # attribute it; its rows reach a part
        claims.release(["cat/001.jpg"])

A claim is RUN_DIR/claims/<hash of the image key>.json holding the writer's pid, host, start time and a nonce. A
second run into the same folder skips the images another live writer holds and takes the rest, so two runs compute
each image once; torchrun ranks take disjoint shards, so they never meet a claim of one another. A claim is held
until the image's rows are in a committed part, then removed. A claim is stale, and taken over, when its pid is
dead on this host, or, for a claim of another host, when it has not been refreshed for `cache.STALE_SECONDS` (a
live writer refreshes its claims after every chunk). Per-image claims rather than one lock per run: a second run
then helps instead of waiting, and a few dozen claim files exist at a time (those of the images in flight).
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import time
from pathlib import Path

from ..cache import abandoned, create_new, host_tag

CLAIMS = "claims"


class Claims:
    """This process's claims on the images of one run folder."""

    def __init__(self, run_dir: str | os.PathLike):
        self.folder = Path(run_dir) / CLAIMS
        self.held: dict[str, Path] = {}
        self.me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(),
                   "nonce": secrets.token_hex(8)}

    def path(self, key: str) -> Path:
        """The claim file of image `key` (a hash: image keys are paths with slashes)."""
        return self.folder / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"

    def take(self, key: str) -> bool:
        """Claim image `key`: True when this process holds it now (it was free, or its claim stale), False while
        another live writer holds it."""
        if key in self.held:
            return True
        path = self.path(key)
        # Created whole (`create_new`): a writer killed while claiming leaves no empty claim, which nobody could
        # tell from one being written and which would hold the image for `cache.STALE_SECONDS`.
        text = json.dumps({**self.me, "image": key})
        for _ in range(3):
            if create_new(path, text):
                self.held[key] = path
                return True
            if not self._take_over(path):
                return False
        return False

    def _take_over(self, path: Path) -> bool:
        """Remove a stale claim at `path` (True: try to create it again); False while its writer lives. The claim
        is first renamed away and checked to be the very file judged stale (same inode, not merely the same
        contents: a fresh claim not yet written reads like an unreadable stale one), so two processes taking over at
        once never remove a fresh claim of a third."""
        try:
            seen = path.stat()
        except FileNotFoundError:
            return True
        if not stale(_read(path), seen.st_mtime):
            return False
        moved = path.with_name(f".{path.name}.{self.me['nonce']}.takeover")
        try:
            os.rename(path, moved)
        except FileNotFoundError:  # another process took it over first
            return True
        now = moved.stat()
        if (now.st_ino, now.st_dev) == (seen.st_ino, seen.st_dev):
            moved.unlink(missing_ok=True)
            return True
        try:  # a fresh claim was moved: put it back
            os.link(moved, path)
        except FileExistsError:
            pass
        moved.unlink(missing_ok=True)
        return False

    def refresh(self) -> None:
        """Mark this process's claims as alive (their time), so another host does not take them over."""
        for path in self.held.values():
            try:
                os.utime(path)
            except FileNotFoundError:
                pass

    def release(self, keys) -> None:
        """Give up the claims of `keys` (their rows are committed, or were never made); a claim that is no longer
        this process's (taken over as stale) is left to its new holder."""
        for key in list(keys):
            path = self.held.pop(key, None)
            if path is not None and (_read(path) or {}).get("nonce") == self.me["nonce"]:
                path.unlink(missing_ok=True)

    def release_all(self) -> None:
        """Give up every claim this process holds."""
        self.release(list(self.held))


#: The largest claim file read: a claim holds a pid, a host, a time, a nonce and the image's key (a path), a few
#: hundred bytes; a larger one (edited, or garbage) is unreadable, judged by its age alone.
MAX_CLAIM_BYTES = 64 * 1024
#: The largest process id a claim may name (Linux's pid_max is at most 2**22): beyond it os.kill overflows.
MAX_PID = 2**31 - 1


def _read(path: Path) -> dict | None:
    """A claim's contents; None when it is unreadable (being written, damaged, too large, or nested too deep)."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CLAIM_BYTES + 1)
        if len(data) > MAX_CLAIM_BYTES:
            return None
        info = json.loads(data.decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: brackets nested past the parser's stack
        return None
    return info if isinstance(info, dict) else None


def stale(claim: dict | None, mtime: float) -> bool:
    """Whether a claim's writer is gone (`cache.abandoned`): its pid dead on this host, or no refresh for
    `cache.STALE_SECONDS` (another host, or a claim that cannot be read)."""
    claim = claim or {}
    host = claim.get("host")
    pid = claim.get("pid")
    pid = pid if isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid <= MAX_PID else None
    return abandoned(host_tag(host) if isinstance(host, str) else None, pid, mtime)


__all__ = ["CLAIMS", "Claims", "stale"]
