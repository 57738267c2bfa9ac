"""`farm diff A.hsaco B.hsaco [--json]`: read two files safely, compare them, print the listing or JSON."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from farm.assure.elfdiff.comparison import compare
from farm.assure.elfdiff.rendering import render, summary, to_json
from farm.core.errors import FarmError

USAGE = "usage: farm diff A.hsaco B.hsaco [--json]"


def _kind_of(mode: int) -> str | None:
    """None for a regular file, else what to say about it."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, not a code object"
    names = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    what = next((name for test, name in names if test(mode)), "a special file")
    return f"is not a regular file (it is {what})"


def read_object(path_text: str) -> bytes:
    """The bytes of a regular file. Anything else is named for what it is (a directory is not "no such
    file"), and a FIFO is never opened for reading, which would block until a writer came."""
    path = Path(path_text)
    fix = "give the paths of two code objects (.hsaco)"
    try:
        kind = _kind_of(os.stat(path).st_mode)
        if kind is None:  # opened without blocking, and checked again: it may have been swapped meanwhile
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                kind = _kind_of(os.fstat(f.fileno()).st_mode)
                if kind is None:
                    return f.read()
    except FileNotFoundError:
        raise FarmError(f"no such file: {path}", fix) from None
    except OSError as exc:
        raise FarmError(f"cannot read {path}: {exc.strerror}", "check the path and its permissions") from None
    raise FarmError(f"{path} {kind}", fix)


def main(flags: set[str], args: list[str]) -> int:
    """farm diff A.hsaco B.hsaco [--json]: exit 0 identical, 1 different (2 via FarmError: bad usage)."""
    unknown = flags - {"--json"}
    if unknown:
        raise FarmError(f"unknown flag(s) {', '.join(sorted(unknown))}; {USAGE}", "drop them")
    if len(args) != 2:
        raise FarmError(f"expected two code objects, got {len(args)}; {USAGE}", "name exactly two .hsaco files")
    data_a, data_b = read_object(args[0]), read_object(args[1])
    diffs = compare(data_a, data_b)
    # The listing (or the JSON) is what the command is asked for: stdout.
    if "--json" in flags:
        report = {"a": args[0], "b": args[1], "identical": not diffs, "summary": summary(diffs),
                  "differences": to_json(diffs)}
        print(json.dumps(report, indent=2))
    else:
        print(f"A: {args[0]} ({len(data_a)} bytes)\nB: {args[1]} ({len(data_b)} bytes)")
        print(render(diffs))
    return 1 if diffs else 0
