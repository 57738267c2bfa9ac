"""One fork-per-job step shared by the warm servers (zygote.py, binary_step.py)."""

from __future__ import annotations

import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable

# Children that told their exit code and are still exiting. A forked copy of a warm server (torch and
# FlyDSL loaded: ~300 MB mapped) takes ~5-30 ms to tear down after its last line; the row need not wait
# for that, so the server answers as soon as the child told, and reaps it at a later fork once it is gone.
_EXITING: list[int] = []


def run_forked(child: Callable[[], int], on_start: Callable[[int], None] | None = None,
               deadline: float | None = None) -> int:
    """Run `child` in a forked process and return its exit code (negative: killed by that signal).
    The child never returns into the server's loop: it leaves through os._exit, whatever happens; it tells
    its exit code through a pipe right before, and the code is returned then (the exit itself finishes
    while the caller goes on). `on_start` gets the child's pid (the zygote tells its parent, which enforces
    the row's deadline); past `deadline` (time.monotonic()) the child is killed, whatever it does with its
    own signals."""
    _reap_exiting()
    sys.stdout.flush()
    sys.stderr.flush()
    told_fd, tell_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(told_fd)
        code = 1
        try:
            code = child()
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.write(tell_fd, bytes([code & 0xFF]))
            os._exit(code)
    os.close(tell_fd)
    try:
        if on_start is not None:
            on_start(pid)
        told = _told(told_fd, deadline)
    finally:
        os.close(told_fd)
    if told is None:
        os.kill(pid, signal.SIGKILL)  # not reaped yet, so the pid is still this child's
    elif told:
        _EXITING.append(pid)
        return told[0]
    # Killed, or it ended without telling (a signal, its own alarm): its real status.
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _told(fd: int, deadline: float | None) -> bytes | None:
    """The child's one-byte exit code; b"" when it ended without telling; None when `deadline` passed first."""
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return None
        if select.select([fd], [], [], left)[0]:
            return os.read(fd, 1)


def _reap_exiting() -> None:
    """Reap the children that have finished exiting; one still tearing down is left for the next fork (a
    zombie meanwhile), so a fork never waits for it: waiting cost the next row 0-30 ms (mean ~7) on a
    loaded 2-core machine."""
    _EXITING[:] = [pid for pid in _EXITING if os.waitpid(pid, os.WNOHANG)[0] == 0]
