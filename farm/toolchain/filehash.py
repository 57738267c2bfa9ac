"""SHA256 of files, remembered per file identity in a private per-user cache."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
from pathlib import Path

from farm.core.private import read_private_text, write_private_text


def identity(path: str | Path, st: os.stat_result) -> str:
    return f"{path}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def hash_open_file(path: str | Path) -> tuple[str, str | None]:
    """(SHA256 of the bytes, the identity they belong to), the identity None when the file changed while
    it was read (then the digest is used once, never remembered)."""
    # Non-blocking open, then only a regular file is read: a FIFO or device planted there never hangs us.
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
        before = os.fstat(f.fileno())
        if not stat.S_ISREG(before.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        digest = hashlib.file_digest(f, "sha256").hexdigest()
        after = os.fstat(f.fileno())
    same = identity(path, before) == identity(path, after)
    return digest, identity(path, before) if same else None


class FileHashes:
    """SHA256 of files, remembered per file identity (path, device, inode, size, mtime_ns, ctime_ns) in one
    JSON file of a private per-user directory (farm/core/private.py: nobody else can plant an entry).

    Every write and every timestamp reset moves the inode's ctime, which no user can set back, so a file
    changed in place has a new identity and is hashed again: an entry is used only on an exact identity
    match. Saving keeps only the entries this run used, so stale identities do not pile up. An unreadable
    cache is recomputed; one that cannot be written only costs time."""

    def __init__(self, cache_file: Path | None) -> None:
        self.cache_file = cache_file
        self.known = self._load()
        self.used: dict[str, str] = {}

    def _load(self) -> dict[str, str]:
        if self.cache_file is None:
            return {}
        try:
            data = json.loads(read_private_text(self.cache_file) or "{}")
        except ValueError:
            return {}
        if not isinstance(data, dict):
            return {}
        return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str) and len(v) == 64}

    def sha256(self, path: str | Path, fresh: bool = False) -> str:
        """The file's SHA256; `fresh` reads the bytes even when the identity is remembered."""
        key = identity(path, os.stat(path))
        if not fresh and key in self.known:
            self.used[key] = self.known[key]
            return self.known[key]
        digest, same = hash_open_file(path)
        if same is not None:
            self.used[same] = digest
        return digest

    def save(self) -> None:
        if self.cache_file is None or self.used == self.known:
            return
        try:
            write_private_text(self.cache_file, json.dumps(self.used, sort_keys=True))
        except OSError:
            pass  # a cache we cannot write only costs time


def cached_sha256(path: Path, cache_file: Path | None) -> str:
    """One file's SHA256, remembered in `cache_file` (hashing the 180 MB zig binary takes ~0.6 s)."""
    hashes = FileHashes(cache_file)
    digest = hashes.sha256(path)
    hashes.save()
    return digest
