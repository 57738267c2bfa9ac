"""Which builds are using the standing cluster: the in-use lock, `.farm/cluster/in-use.lock`.

A build that uses the standing cluster holds it shared (flock LOCK_SH) for as long as it uses it; the
kernel drops it when the build's process ends, however it ends. A build that finds the daemon running
older farm code may stop it only while it holds this lock exclusively, which it takes without waiting:
getting it proves no build is using the old daemon, so replacing it never pulls a cluster from under a
running build. The replacer keeps the lock (turned shared) for its own use of the new daemon.

No Ray here: a build takes these decisions before it knows whether it compiles anything.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from farm.core.locking import take_lock, try_lock
from farm.execute.standing_files import StandingState, running, state_dir

IN_USE_FILE = "in-use.lock"
POLL_S = 0.1

# This process's open in-use lock per project root (shared, or exclusive while it replaces the daemon).
_held: dict[Path, int] = {}


def _lock(root: Path, *, shared: bool) -> bool:
    """Take the in-use lock (or turn this process's hold into) shared or exclusive, without waiting; keep it
    in _held when taken."""
    fd = _held.get(root)
    if fd is None:
        state_dir(root).mkdir(parents=True, exist_ok=True)
        fd = take_lock(state_dir(root) / IN_USE_FILE, shared=shared)
        if fd is None:
            return False
    elif not try_lock(fd, shared=shared):
        return False
    _held[root] = fd
    return True


def release(root: Path) -> None:
    """Stop holding the in-use lock (this process no longer uses the standing cluster)."""
    fd = _held.pop(root, None)
    if fd is not None:
        os.close(fd)


def take_exclusive(root: Path) -> bool:
    """No build uses the standing cluster now, and none can start to until `share` or `release`."""
    release(root)  # this process's own shared hold would otherwise count as a user
    return _lock(root, shared=False)


def share(root: Path) -> None:
    """Turn this process's exclusive hold into a shared one (it uses the daemon it just started)."""
    if root in _held:
        _lock(root, shared=True)  # from exclusive to shared never waits


def being_replaced(root: Path) -> bool:
    """Is another build replacing the daemon right now (it holds the lock exclusively)?"""
    if root in _held:
        return False
    if _lock(root, shared=True):
        release(root)
        return False
    return True


def wait_replaced(root: Path, timeout_s: float) -> None:
    """Wait (at most `timeout_s`) until another build has stopped the old daemon and started its new one."""
    deadline = time.monotonic() + timeout_s
    while being_replaced(root) and time.monotonic() < deadline:
        time.sleep(POLL_S)


def hold(root: Path, state: StandingState) -> bool:
    """Hold the in-use lock shared for this build's use of `state`'s daemon; False (nothing held) when
    another build is replacing it, or it is no longer the daemon that is up."""
    if root not in _held and not _lock(root, shared=True):
        return False
    now = running(root)
    if now is None or now["pid"] != state["pid"]:
        release(root)
        return False
    return True
