"""One fork-per-job step shared by the warm servers (zygote.py, binary_step.py)."""

from __future__ import annotations

import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable


def run_forked(child: Callable[[], int], on_start: Callable[[int], None] | None = None,
               deadline: float | None = None) -> int:
    """Run `child` in a forked process and return its exit code (negative: killed by that signal).
    The child never returns into the server's loop: it leaves through os._exit, whatever happens.
    `on_start` gets the child's pid (the zygote tells its parent, which enforces the row's deadline);
    past `deadline` (time.monotonic()) the child is killed, whatever it does with its own signals."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = child()
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    if on_start is not None:
        on_start(pid)
    if deadline is not None and not _exits_before(pid, deadline):
        os.kill(pid, signal.SIGKILL)  # not reaped yet, so the pid is still this child's
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _exits_before(pid: int, deadline: float) -> bool:
    """Wait until the child `pid` exits (True) or `deadline` passes (False); it is not reaped."""
    fd = os.pidfd_open(pid)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if select.select([fd], [], [], left)[0]:
                return True
    finally:
        os.close(fd)
