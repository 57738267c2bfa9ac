"""How a compile process ended, and what its log says: the one-line failure the driver prints."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Outcome:
    """How one compile process ended: its exit code, or why there is none (`cause`)."""

    code: int | None
    log: str
    warmup: float = 0.0
    cause: str | None = None  # "timeout" or "server died: ..." when code is None


def how_it_ended(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exited with status {code}"


# Lines of a compiler log that name the cause (the log's tail is mostly the MLIR module FlyDSL prints).
CAUSE_MARKERS = re.compile(r"^\s*(error:|LLVM ERROR)|\blld\b|ld\.lld|^[\w.]*(Error|Exception): ")
CAUSE_LINES = 3
CAUSE_CHARS = 240


def cause_of(log: str) -> str:
    """The few lines of `log` saying why a compile failed: error lines first, else the last exception."""
    lines = [line.strip() for line in log.splitlines()]
    marked = [line for line in lines if CAUSE_MARKERS.search(line) and not line.startswith(("File ", "raise "))]
    errors = [line for line in marked if line.startswith(("error:", "LLVM ERROR")) or "lld" in line]
    chosen = list(dict.fromkeys(errors or marked[-1:]))[:CAUSE_LINES]
    return " | ".join(line[:CAUSE_CHARS] for line in chosen)


def warnings_in(log: str) -> list[str]:
    """The compiler's warning lines (LLVM, MLIR and Python warnings all say 'warning')."""
    return [line.strip() for line in log.splitlines() if "warning" in line.lower()]


def failure_message(outcome: Outcome, timeout_s: float) -> str:
    """One line for the driver's `FAILED key: ...`: what happened, and the compiler's own words."""
    if outcome.cause == "timeout":
        return f"compile did not finish: time limit {timeout_s:.0f} s reached, the compile process was killed"
    if outcome.cause:
        detail = outcome.cause.removeprefix("server died: ")
        return (f"compile did not finish: the warm compile server died ({detail}), not the time limit; "
                "its log follows the compiler output")
    cause = cause_of(outcome.log)
    return f"compiler process {how_it_ended(outcome.code or 0)}" + (f": {cause}" if cause else "")


def real_source_paths(log: str, kernels_root: Path) -> str:
    """`log` with the private copy of the kernel sources named as the project's kernels_src/ (a traceback
    then points at the file to edit, not at a temporary directory that is gone)."""
    for root in dict.fromkeys((str(kernels_root), os.path.realpath(kernels_root))):
        log = log.replace(root + os.sep, "kernels_src/")
    return log
