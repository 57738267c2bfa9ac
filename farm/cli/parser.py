"""`farm [-v|-q] VERB [--flags] [key=value ...]` parsed with argparse: one subparser per verb (farm/cli/verbs.py).

Words without a leading dash are the verb's words (Hydra overrides for most verbs) wherever they stand.
A flag the verb does not take is an error naming it and the flags it does take; a misspelled verb gets
the nearest verbs. Help and usage errors never run the verb.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import textwrap
from dataclasses import dataclass
from typing import NoReturn

from farm.cli.verbs import BY_NAME, OVERRIDES, PASS_FLAGS_THROUGH, VERBS, Verb, listing
from farm.core.errors import FarmError
from farm.table.quoting import shortened, shown

TOP_USAGE = "farm [-h] [--version] [-v | -q] VERB [--flags] [key=value ...]"
GLOBAL_HELP = {"verbose": "say more: debug records on stderr; plan and status list every row/directory; "
                          "pull and push errors list every file, not the first few",
               "quiet": "warnings and errors only on stderr (no progress)"}
EPILOG = f"""verbs:
{listing()}

selection and paths (Hydra overrides):
  ops=[rmsnorm] targets=[gfx942,gfx950] dtypes=[bf16] outputs_dir=PATH
  executor=cluster executor.address=HOST:PORT

`farm VERB --help` shows one verb's words and flags. -v/-q may stand before or after the verb.
"""


class HelpShown(Exception):
    """argparse printed help (or a usage line) and wants to exit with `status`: the verb does not run."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class UsageError(FarmError):
    """A command line the farm cannot run; `prog` is what it reports under ("farm" or "farm VERB")."""

    def __init__(self, prog: str, what: str, fix: str) -> None:
        super().__init__(what, fix)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    """argparse that reports instead of exiting, so `main` returns the exit code (tests call it)."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self.prog, message, f"see `{self.prog} --help`")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        raise HelpShown(status)


@dataclass(frozen=True)
class Invocation:
    """One parsed command line: the verb, its words in order, the flags given (long names), -v/-q."""

    verb: Verb
    words: list[str]
    flags: frozenset[str]
    verbosity: int  # -1 quiet, 0 normal, 1+ verbose (farm.core.log.configure)

    @property
    def verbose(self) -> bool:
        return self.verbosity > 0


def _global_flags(parser: argparse.ArgumentParser, suffix: str) -> None:
    parser.add_argument("-v", "--verbose", action="count", default=0, dest=f"verbose{suffix}",
                        help=GLOBAL_HELP["verbose"])
    parser.add_argument("-q", "--quiet", action="store_true", dest=f"quiet{suffix}", help=GLOBAL_HELP["quiet"])


def _verb_parser(subparsers: argparse._SubParsersAction, verb: Verb) -> None:  # noqa: SLF001 (argparse's type)
    flags = " ".join(f"[{'|'.join(f.names)}]" for f in verb.flags)
    words = f"[{verb.words} ...]" if verb.words == OVERRIDES else verb.words
    epilog = "\n".join(textwrap.fill(line, 100) for line in verb.details.splitlines()) or None
    p = subparsers.add_parser(verb.name, help=verb.summary, description=verb.summary, epilog=epilog,
                              usage=f"farm {verb.name} [-h] [-v | -q] {flags + ' ' if flags else ''}{words}",
                              formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    _global_flags(p, "_verb")
    for flag in verb.flags:
        p.add_argument(*flag.names, action="store_true", dest=_dest(flag.name), help=flag.help)
    p.add_argument("words", nargs="*", metavar=verb.words, help=verb.words_help)


def _dest(flag: str) -> str:
    return "flag_" + flag.lstrip("-").replace("-", "_")


def build_parser() -> _Parser:
    top = _Parser(prog="farm", usage=TOP_USAGE, epilog=EPILOG, allow_abbrev=False,
                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="store_true", help="the farm's version and the pinned FlyDSL version")
    _global_flags(top, "")
    subparsers = top.add_subparsers(dest="verb", parser_class=_Parser, help=argparse.SUPPRESS)
    for verb in VERBS:
        _verb_parser(subparsers, verb)
    return top


def accepted_flags(verb: Verb) -> list[str]:
    return [*("/".join(f.names) for f in verb.flags), "-v/--verbose", "-q/--quiet", "-h/--help"]


def _nearest(word: str, choices: list[str], cutoff: float = 0.6) -> str:
    near = difflib.get_close_matches(word, choices, n=2, cutoff=cutoff)
    return f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else ""


def unknown_verb(word: str) -> UsageError:
    names = [v.name for v in VERBS]
    return UsageError("farm", f"unknown verb {shown(word)}{_nearest(word, names)}",
                     f"use one of: {', '.join(names)} (`farm --help` lists them)")


def unknown_flag(verb: Verb, flag: str) -> UsageError:
    spellings = [name for f in verb.flags for name in f.names] + ["-v", "--verbose", "-q", "--quiet", "-h", "--help"]
    near = _nearest(flag.split("=")[0], spellings, cutoff=0.75)
    return UsageError(f"farm {verb.name}", f"unknown flag {shortened(flag)}{near}",
                      f"accepted flags: {', '.join(accepted_flags(verb))}")


def verb_index(args: list[str]) -> int | None:
    """Where the verb stands: the first word without a leading dash (global flags take no values)."""
    return next((i for i, arg in enumerate(args) if not arg.startswith("-")), None)


def parse(parser: _Parser, args: list[str]) -> Invocation | None:
    """The invocation, or None for `--version`. Raises HelpShown after help and UsageError on a usage error."""
    at = verb_index(args)
    if at is not None and args[at] not in BY_NAME:
        raise unknown_verb(args[at])
    ns, extras = parser.parse_known_args(args)
    if ns.version:
        return None
    if ns.verb is None:
        raise UsageError("farm", "no verb given", f"use one of: {', '.join(v.name for v in VERBS)} (`farm --help`)")
    verb = BY_NAME[ns.verb]
    stray = [a for a in extras if a.startswith("-")]
    if stray and verb.name not in PASS_FLAGS_THROUGH:
        raise unknown_flag(verb, stray[0])
    given = {f.name for f in verb.flags if getattr(ns, _dest(f.name))}
    quiet = ns.quiet or ns.quiet_verb
    verbosity = -1 if quiet else ns.verbose + ns.verbose_verb
    # Words after a flag land in extras (argparse fills a positional once): they keep their order.
    words = ns.words + [a for a in extras if not a.startswith("-")]
    return Invocation(verb, words, frozenset(given) | frozenset(stray), verbosity)
