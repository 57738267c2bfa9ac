"""A warm compile server: imports torch and FlyDSL once, then forks one child per compile.

Importing torch and flydsl costs ~2.5 s, several times a small compile. The zygote pays it once per
worker. Each compile still runs in its own process, forked from the same post-import state: an LLVM
abort kills only that child, and nothing one compile does can leak into the next.

Protocol (one JSON object per line): the zygote says {"ready": true} once its imports are done; then
the parent writes a job {request, result, log, env, cwd, timeout_s} and the zygote replies
{"pid": P} as soon as it forked the job's child, then {"returncode": N} (negative: killed by that
signal) as soon as the child told its code, its files written (it finishes exiting meanwhile:
farm/worker/forking.py). The parent enforces the row's deadline: past it, it kills child P itself,
because a compile can install its own SIGALRM handler and outlive the child's alarm.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import tempfile
from typing import TypedDict

from farm.worker import flydsl_compat
from farm.worker.farm_code import remember_loaded
from farm.worker.forking import run_forked
from farm.worker.main import main


class Job(TypedDict):
    """One line from the parent (farm/worker/warm.py `Zygote.run`)."""

    request: str  # the CompileJob file
    result: str  # where the object goes
    log: str  # the child's stdout and stderr
    env: dict[str, str]  # the child's whole environment
    cwd: str
    timeout_s: float


def _run_child(job: Job) -> int:
    """In the forked child: become a fresh compile process for this job."""
    # A compile lives for a fraction of a second and its memory goes when it exits: cyclic GC would
    # only touch (and so copy) pages shared with the zygote.
    gc.disable()
    fd = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.clear()
    os.environ.update(job["env"])
    tempfile.tempdir = None  # re-read TMPDIR from the job's environment
    os.chdir(job["cwd"])
    signal.alarm(max(1, int(job["timeout_s"])))  # default SIGALRM action ends a runaway compile
    return main([job["request"], job["result"]])


def preload() -> None:
    """The imports a compile process makes before it compiles (a fresh one makes them too). Only imports:
    no compile ever runs in the zygote, because a child forked after a compile can deadlock on locks held
    by the compiler's threads."""
    import torch  # noqa: F401  (the expensive import, done once; the kernels use it, the farm does not)

    flydsl_compat.preload()


def serve() -> None:
    preload()
    # The MLIR context every child's compile uses, made once here, unused: a fork making its own cost ~10 ms
    # a row (bench/fork_tax.py). Every child starts from the same one, so no row sees another's history.
    flydsl_compat.use_premade_context()
    remember_loaded()
    # Move everything imported so far out of the collector's reach: the children then do not write
    # to (copy-on-write fault) those objects' pages.
    gc.collect()
    gc.freeze()
    sys.stdout.write(json.dumps({"ready": True}) + "\n")  # the parent times the warm-up apart from compiles
    sys.stdout.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        job: Job = json.loads(line)
        code = run_forked(lambda job=job: _run_child(job), on_start=_tell)
        _tell_parent({"returncode": code})


def _tell(pid: int) -> None:
    _tell_parent({"pid": pid})


def _tell_parent(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def fresh(argv: list[str]) -> int:
    """A fresh interpreter's compile: the warm server's imports, then the job itself (no fork)."""
    preload()
    return main(argv)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--fresh"]:
        sys.exit(fresh(sys.argv[2:]))
    serve()
