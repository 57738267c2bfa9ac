"""The one entry point: `farm [-v|-q] VERB [--flags] [key=value ...]` (Hydra overrides for every option).

Exit codes: 0 done, 1 the verb's own "no" (drift, a stale table, failed rows), 2 a usage or user-fixable
error (one message naming the thing and the fix), 130 interrupted, 141 the reader of stdout went away.
"""

from __future__ import annotations

import importlib
import logging
import os
import select
import sys

from farm.cli.parser import HelpShown, Invocation, UsageError, build_parser, parse
from farm.cli.selection import load
from farm.cli.verbs import BY_NAME
from farm.core.errors import FarmError
from farm.core.log import configure

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    configure(0)  # until -v/-q are read: a usage error is reported like any other error
    parser = build_parser()
    if not args:
        parser.print_help()
        return 2
    if args[0] == "help":  # `farm help [VERB]`
        return _help(parser, args[1:])
    try:
        invocation = parse(parser, args)
    except HelpShown as shown:
        return shown.status
    except UsageError as exc:
        log.error("%s: error: %s", exc.prog, exc)
        return 2
    if invocation is None:
        print(version_text())
        return 0
    configure(invocation.verbosity)
    return run(invocation)


def _help(parser: object, rest: list[str]) -> int:
    """`farm help` is `farm --help`; `farm help VERB` is `farm VERB --help`."""
    try:
        parse(parser, [rest[0], "--help"] if rest and rest[0] in BY_NAME else ["--help"])  # type: ignore[arg-type]
    except HelpShown as shown:
        return shown.status
    return 0


def run(inv: Invocation) -> int:
    """Run the verb. Its module is imported only now: `farm plan` never loads Ray, DVC or the compile code."""
    module, function = inv.verb.run.split(":")
    verb = inv.verb.name
    try:
        return getattr(importlib.import_module(module), function)(inv)
    except FarmError as exc:
        log.error("farm %s: error: %s", verb, exc)
        return 2
    except BrokenPipeError:
        if not _stdout_closed():
            raise
        # The reader went away (`farm plan -v | head -3`): stop quietly, as a process killed by SIGPIPE
        # would; stdout goes to /dev/null so the flush at exit cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    except KeyboardInterrupt:
        log.warning("farm %s: interrupted; finished objects are kept, run it again to resume", verb)
        return 130


def _stdout_closed() -> bool:
    """Is stdout a pipe whose reader has gone (and not, say, a Ray or subprocess pipe that broke)?"""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def version_text() -> str:
    """`farm --version`: the installed farm, and the FlyDSL version the project's toolchain pin names."""
    try:
        pinned = str(load([]).toolchain_pin.get("flydsl") or "not pinned")
    except FarmError as exc:
        pinned = f"unknown ({exc.what})"
    return f"farm {_installed('farm')}\nflydsl {pinned} pinned, {_installed('flydsl')} installed"


def _installed(distribution: str) -> str:
    # Imported here: importlib.metadata costs ~60 ms at every start, and only --version needs it.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "none"
