"""One fork-per-job step shared by the warm servers (zygote.py, binary_step.py)."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable


def run_forked(child: Callable[[], int]) -> int:
    """Run `child` in a forked process and return its exit code (negative: killed by that signal).
    The child never returns into the server's loop: it leaves through os._exit, whatever happens."""
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
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)
