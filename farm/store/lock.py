"""One lock per output tree, held by every command that writes there (build, pull, push, pin).

Two builds that rewrite the same manifest at once lose entries, and one build's clean-up can delete the
other's in-flight files. So every writer takes an exclusive `flock` on a lock file next to the tree
(`<parent>/.<tree name>.lock`: outside the tree, so DVC never publishes it), and `farm check` takes a
shared one, so it never reads a directory half-way through a batch. The holder writes its pid and
command line into the file, so a waiter can say who it is waiting for. The kernel drops an `flock`
when its holder dies, however it dies: a lock is never left behind.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from farm.core.errors import FarmError
from farm.core.locking import open_lock_file, try_lock
from farm.table.config import FarmConfig

POLL_S = 0.2
# How long a waiter looks for the name of a holder that has just taken the lock before it says "another".
NAME_WAIT_S = 1.0

log = logging.getLogger(__name__)


def lock_path(tree: Path) -> Path:
    tree = tree.absolute()
    return tree.parent / f".{tree.name}.lock"


def _open_lock_file(path: Path) -> int:
    """Open (create) the lock file without following a symlink; refuse anything but a regular file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return open_lock_file(path, 0o644)


# Said of a holder that left no name: a reader, or a writer between taking the lock and naming itself.
UNNAMED = "another farm command (a reader such as farm check, or a writer that is starting)"


def holder(path: Path) -> str | None:
    """Who holds the lock: 'pid N (command)' for a writer; None when it left no name (readers never do)."""
    try:
        info = json.loads(path.read_text() or "{}")
        return f"pid {int(info['pid'])} ({info['command']})"
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _record_holder(fd: int, command: str) -> None:
    text = json.dumps({"pid": os.getpid(), "command": command}) + "\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode(), 0)


@contextlib.contextmanager
def tree_lock(tree: Path, command: str, *, shared: bool = False, wait_s: float | None = None,
              ) -> Iterator[None]:
    """Hold the lock on `tree` for the block. Waits for a holder (saying once who it is), at most
    `wait_s` seconds when given (0: refuse at once); then a FarmError names the holder."""
    path = lock_path(tree)
    fd = _open_lock_file(path)
    try:
        began = time.monotonic()
        deadline = None if wait_s is None else began + max(0.0, wait_s)
        said = False
        while not try_lock(fd, shared=shared):
            named = holder(path)
            who = named or UNNAMED
            if deadline is not None and time.monotonic() >= deadline:
                raise FarmError(f"{tree} is locked by {who}",
                                "wait for it to finish, or run again without lock_wait_s= to wait for it")
            # A writer names itself just after it takes the lock: a waiter that looked in between
            # waits a moment for the name before it says whom it waits for (a reader never names one).
            if not said and (named is not None or time.monotonic() - began >= NAME_WAIT_S):
                log.warning("waiting for %s: it is locked by %s (lock file %s)", tree, who, path)
                said = True
            time.sleep(POLL_S)
        if not shared:
            _record_holder(fd, command)
        try:
            yield
        finally:
            if not shared:
                os.ftruncate(fd, 0)  # a later waiter must not name a holder that has gone
    finally:
        os.close(fd)  # closing drops the flock


def lock_wait(cfg: FarmConfig) -> float | None:
    """`lock_wait_s`: how long a writer waits for the output tree's lock (null: as long as it takes)."""
    value = cfg.extra.get("lock_wait_s")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise FarmError(f"lock_wait_s={value!r} is not a number of seconds >= 0",
                        "lock_wait_s=0 refuses at once when another command holds the lock; null waits")
    return float(value)


def command_line() -> str:
    """This command as a user would type it: `farm VERB ...` when it is the farm's CLI (the console script,
    or `python -m farm.cli`, whose argv[0] is the package's __main__.py)."""
    is_farm = sys.argv and sys.argv[0].endswith(("farm", "cli.py", "cli/__main__.py"))
    return "farm " + " ".join(sys.argv[1:]) if is_farm else " ".join(sys.argv)
