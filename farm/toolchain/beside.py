"""The build's toolchain check, run in a child process beside the build's first steps instead of before them.

Identifying what is installed by content (the pin's `content` block: every file of flydsl, numpy and torch,
~12,000 of them stat'ed and looked up) takes ~0.5 s, a sixth of a small rebuild. The build needs its answer
only before it changes anything on disk, so it forks the check while it is still one thread, goes on
restoring, connecting and sending rows to compile, and waits for the answer (`PinCheck.wait`) before it opens
an output directory and before it verifies the first result. A toolchain that differs from the pin still
fails the build with one error and nothing written, deleted or recorded.

A process, not a thread: the check runs on the other core instead of taking turns with the driver for the
interpreter's lock, and the driver stays a single thread for the processes it forks later (the restore
stage's verifiers).
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection

from farm.core.errors import FarmError

# What the child sends back: None when the check passed, else (what, fix) of its FarmError.
Answer = tuple[str, str | None] | None


def _answer_of(check: Callable[[], None]) -> Answer:
    try:
        check()
    except FarmError as exc:
        return (exc.what, exc.fix)
    except Exception as exc:  # anything else is a failed check too, named
        return (f"the toolchain check failed: {type(exc).__name__}: {exc}", "run the command again; if it fails "
                "the same way, `farm pin` shows what is installed")
    return None


def _run(check: Callable[[], None], send: Connection) -> None:
    # Ctrl-C reaches the whole process group: the build handles it, and ends this child as it exits.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    send.send(_answer_of(check))
    send.close()


class PinCheck:
    """`check` (raises FarmError when the installed toolchain is not the pinned one) running beside the
    caller. `wait` returns when it passed and raises its FarmError, every time it is called, when it did not."""

    def __init__(self, check: Callable[[], None]) -> None:
        self._answer: Answer = None
        self._pending = True
        if threading.active_count() > 1:  # forking beside other threads is not safe: check here and now
            self._pending = False
            self._answer = _answer_of(check)
            return
        context = multiprocessing.get_context("fork")
        self._receive, send = context.Pipe(duplex=False)
        # daemon: a build that fails before it waits does not leave the check behind
        self._process = context.Process(target=_run, args=(check, send), name="farm-pin-check", daemon=True)
        self._process.start()
        send.close()

    def wait(self) -> None:
        if self._pending:
            try:
                answer = self._receive.recv()
            except EOFError:
                self._process.join()
                answer = (f"the toolchain check ended without an answer (exit code {self._process.exitcode})",
                          "run the command again")
            # Pending until an answer came: a wait interrupted (Ctrl-C) never counts as a pass.
            self._answer, self._pending = answer, False
            self._receive.close()
            self._process.join()
        if self._answer is not None:
            raise FarmError(*self._answer)
