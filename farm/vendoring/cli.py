"""`farm vendor SUB key=value ...`: dispatch to add / diff / note with each one's accepted keys."""

from __future__ import annotations

from collections.abc import Callable

from farm.core.errors import FarmError
from farm.vendoring import add, diff, note
from farm.vendoring.args import parse, require
from farm.vendoring.project import Project, open_project

Run = Callable[[Project, dict[str, str]], int]
# sub-verb -> (run, accepted keys, required keys, usage)
SUBS: dict[str, tuple[Run, tuple[str, ...], tuple[str, ...], str]] = {
    "add": (add.add, add.KEYS, ("from", "commit", "upstream", "paths"), add.USAGE),
    "diff": (diff.diff, diff.KEYS, ("from",), diff.USAGE),
    "note": (note.note, note.KEYS, ("path", "why", "from"), note.USAGE),
}
# Flags that stand for key=true.
FLAGS = {"--strict": "strict", "--pinned": "pinned", "--force": "force"}


def main(flags: set[str], words: list[str]) -> int:
    subs = ", ".join(SUBS)
    if not words or words[0] not in SUBS:
        got = f"unknown sub-verb {words[0]!r}" if words else "no sub-verb"
        raise FarmError(f"{got}; accepted: {subs}",
                        "e.g. farm vendor add from=<checkout> commit=<sha> upstream=<name> paths=[<path>]")
    sub, rest = words[0], words[1:]
    run, accepted, required, usage = SUBS[sub]
    opts = parse(sub, rest, accepted, usage)
    for flag in sorted(flags):
        key = FLAGS.get(flag)
        if key is None or key not in accepted:
            ok = [f for f, k in FLAGS.items() if k in accepted]
            raise FarmError(f"{sub}: unknown flag {flag} (accepted: {', '.join(ok) or 'none'})", usage)
        if key in opts:
            raise FarmError(f"{sub}: {flag} and {key}= both given", "give one of them")
        opts[key] = "true"
    require(sub, opts, required, usage)
    return run(open_project(), opts)
