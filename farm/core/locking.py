"""The farm's one way to take a file lock: an `flock` on a regular file opened without following a symlink.

The kernel drops an `flock` when its holder's process ends, however it ends, so no lock is ever left
behind. Used by the output tree's lock (farm/store/lock.py), the standing cluster's daemon lock
(farm/execute/standing_files.py) and its in-use lock (farm/execute/standing_use.py).
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path

from farm.core.errors import FarmError


def open_lock_file(path: Path, mode: int = 0o600) -> int:
    """Open (create) `path` for locking, never through a symlink. A path the farm cannot lock (a symlink, a
    FIFO, a directory, a file it may not open) is one FarmError naming it: the farm owns its lock files, so
    the fix is always to remove what stands there."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        raise FarmError(f"cannot open the lock file {path} ({exc.strerror})",
                        f"remove {path} (the farm recreates it) and make {path.parent} writable") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FarmError(f"the lock file {path} is not a regular file", f"remove {path}; the farm recreates it")
    return fd


def try_lock(fd: int, *, shared: bool = False) -> bool:
    """Take (or convert to shared or exclusive) the lock on `fd` without waiting; False when another holds it."""
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def take_lock(path: Path, *, shared: bool = False, mode: int = 0o600) -> int | None:
    """The open file of `path`, locked without waiting; None (nothing left open) when another holds it."""
    fd = open_lock_file(path, mode)
    if try_lock(fd, shared=shared):
        return fd
    os.close(fd)
    return None
