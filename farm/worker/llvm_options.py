"""Per-compile LLVM options: which ones the farm honours, and how the codegen process applies them.

A FlyDSL kernel may ask for LLVM `cl::opt` values for its own compile through its compile hints
(`{"llvm_options": {name: value}}`: `flyc.compile[hints](launcher)`, `CompilationContext.compile_hints`).
FlyDSL (0.3.4, `flydsl.compiler.llvm_options`) sets them for the whole pipeline and restores them after:
each value through `_mlirDialectsFly.set_llvm_option_bool/_int/_str`, chosen by its Python type (bool
before int). The farm's compile process runs FlyDSL's pipeline up to the binary pass with them set, as
FlyDSL does; the binary pass runs in the codegen process (binary_step.py), which gets the same options
with the job and sets them the same way, in the same order, before it parses the module (`applied`).

Refused before anything is set (`check`), by name with the reason:
- `help`, `help-hidden`, `help-list`, `help-list-hidden`, `version`: LLVM prints and ends the process
  (measured with the pinned FlyDSL: `help*` crash it, `version` exits), so no object;
- an option that names a file, given anything but true/false: LLVM would read a file that is no input
  the farm records (the object could change with no recorded input changing), or write one outside the
  compile's private directory. Those are the options with a word `file`, `files`, `filename`, `dir`,
  `directory` or `path` in their name (for an int value: as their last word, so that counts such as
  `dfa-max-path-length` stay allowed), and the pinned LLVM's other string options that take a file, a
  channel or a plugin (`FILE_VALUED`: listed from its registry, flydsl 0.3.4);
- a name that is not a plain option name, or a value that is not a bool, an int or a str (FlyDSL
  raises for those too).
Every other name is passed to LLVM as given: one LLVM does not know fails the compile with LLVM's
"Unknown LLVM option" (FlyDSL's own check).

Only the codegen process imports FlyDSL's setters, and only for a compile that has options: a row
without options runs exactly the code it ran before options were supported.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from farm.contract import LlvmOptions

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
ENDS_THE_PROCESS = frozenset({"help", "help-hidden", "help-list", "help-list-hidden", "version"})
FILE_WORDS = frozenset({"file", "files", "filename", "dir", "directory", "path"})
# String options of the pinned LLVM whose value is a file (or a channel or plugin path) though no word of
# their name says so: found by reading every string option's description in FlyDSL's bundled LLVM.
FILE_VALUED = frozenset({
    "amdgpu-module-splitting-print-module-dotcfg", "amdgpu-module-splitting-print-partition-summaries",
    "amdgpu-next-use-analysis-dump-distance-as-json", "cgscc-inline-replay", "dot-cfg-mssa",
    "inliner-interactive-channel-base", "lowertypetests-read-summary", "lowertypetests-write-summary",
    "memprof-import-summary", "regalloc-evict-interactive-channel-base",
    "regalloc-priority-interactive-channel-base", "sample-profile-inline-replay", "thinlto-workload-def",
    "use-ctx-profile", "wholeprogramdevirt-read-summary", "wholeprogramdevirt-write-summary",
    "x86-lvi-load-opt-plugin",
})
DOC = "docs/adding-a-family.md"


def _refusal(name: object, value: object) -> str | None:
    """Why option `name` = `value` cannot be honoured reproducibly; None when it can."""
    if not isinstance(name, str) or not NAME.match(name):
        return "it is not a plain LLVM option name (write it without leading dashes, e.g. 'enable-post-misched')"
    if name in ENDS_THE_PROCESS:
        return "LLVM prints and ends the process for it, so the compile could make no object"
    if not isinstance(value, bool | int | str):
        return f"its value {value!r} is a {type(value).__name__}; LLVM options take a bool, an int or a str"
    if isinstance(value, str) and "\0" in value:
        return "its value holds a NUL character"
    if _names_a_file(name, value):
        return "it names a file, which LLVM would read (an input no row records) or write (outside the compile)"
    return None


def _names_a_file(name: str, value: bool | int | str) -> bool:
    if isinstance(value, bool):
        return False
    words = name.split("-")
    if name in FILE_VALUED:
        return True
    return any(w in FILE_WORDS for w in words) if isinstance(value, str) else words[-1] in FILE_WORDS


__all__ = ["LlvmOptions", "applied", "check"]


def check(options: object) -> LlvmOptions:
    """The options a compile asked for, as a plain dict in their order; ValueError naming the first refused one."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ValueError(f"compile hint llvm_options must map option names to values, got {type(options).__name__}")
    for name, value in options.items():
        why = _refusal(name, value)
        if why is not None:
            raise ValueError(f"LLVM option {name!r} refused by the farm: {why} (what it supports: {DOC})")
    return dict(options)


@contextmanager
def applied(options: LlvmOptions, setters: Callable[[], Any]) -> Iterator[None]:
    """Set `options` in this process's LLVM as FlyDSL sets them for a compile, and restore them after.
    `setters()` gives FlyDSL's extension module that holds the setters; it is loaded only when there are
    options (farm/worker/flydsl_mlir.py `fly_extension`)."""
    if not options:
        yield
        return
    fly = setters()
    saved: list[tuple[Any, str, Any]] = []
    try:
        for name, value in options.items():
            setter = (fly.set_llvm_option_bool if isinstance(value, bool) else
                      fly.set_llvm_option_int if isinstance(value, int) else fly.set_llvm_option_str)
            saved.append((setter, name, setter(name, value)))
        yield
    finally:
        for setter, name, old in reversed(saved):
            setter(name, old)

