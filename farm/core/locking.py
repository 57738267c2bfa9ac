"""The farm's one way to take a file lock: an `flock` on a regular file opened without following a symlink.

The kernel drops an `flock` when its holder's process ends, however it ends, so no lock is ever left
behind. Used by the output tree's lock (farm/store/lock.py), the standing cluster's daemon lock
(farm/execute/standing_files.py) and its in-use lock (farm/execute/standing_use.py).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from pathlib import Path


class NotRegular(OSError):
    """The lock file's path holds something other than a regular file (a FIFO, a device, a directory)."""


def open_lock_file(path: Path, mode: int = 0o600) -> int:
    """Open (create) `path` for locking, never through a symlink (OSError: ELOOP); NotRegular for anything
    but a regular file."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRegular(errno.EINVAL, "not a regular file", str(path))
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
