"""Instruction classes counted from an `llvm-objdump -d` listing: the parse, with no farm imports.

Standard library only, so a large batch's listing can be parsed in a child process started with
`python -I -S` (no site, no farm package: ~20 ms) instead of in the driver, whose Python is the farm's
serial bottleneck (farm/toolchain/disasm.py decides which). Run as a script, it reads a listing on stdin,
takes the listed files' paths as arguments, and prints `parse_listing`'s result as JSON.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

# First matching prefix wins, so the specific classes come before the catch-all `salu` / `valu`.
CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("mfma", ("v_mfma_", "v_smfmac_")),
    ("wmma", ("v_wmma_", "v_swmmac_")),
    ("lds", ("ds_",)),
    ("vmem", ("buffer_", "global_", "flat_", "scratch_")),
    ("smem", ("s_load_", "s_buffer_load_", "s_store_", "s_buffer_store_", "s_dcache_", "s_scratch_")),
    ("wait", ("s_waitcnt", "s_wait_", "s_barrier", "s_nop", "s_sleep")),
    ("branch", ("s_branch", "s_cbranch_", "s_setpc_", "s_swappc_", "s_getpc_", "s_call_", "s_endpgm")),
    ("salu", ("s_",)),
    ("valu", ("v_",)),
)
OTHER = "other"
CLASS_NAMES: tuple[str, ...] = (*(name for name, _ in CLASSES), OTHER)
EXAMPLES = {name: prefixes[0] + "*" for name, prefixes in CLASSES}
# One object's instruction counts: {function: {class: count}}.
Functions = dict[str, dict[str, int]]


def classify(mnemonic: str) -> str:
    known = _CLASSIFIED.get(mnemonic)
    if known is None:
        known = next((name for name, prefixes in CLASSES if mnemonic.startswith(prefixes)), OTHER)
        if len(_CLASSIFIED) < 100_000:  # a hostile listing cannot grow it without bound
            _CLASSIFIED[mnemonic] = known
    return known


# mnemonic -> class: an object's listing repeats a few hundred mnemonics thousands of times.
_CLASSIFIED: dict[str, str] = {}


def parse_listing(text: str, files: Sequence[Path]) -> dict[Path, Functions]:
    """Split `llvm-objdump -d` output of several files into per-file, per-function class counts.
    The listing is cut at its file and function header lines; each function's mnemonics are counted
    with one regular-expression pass and classified once per distinct mnemonic (a batch's listing holds
    hundreds of thousands of instructions: a Python step per line cost the driver most of its verify)."""
    by_header = {str(f): f for f in files}
    out: dict[Path, Functions] = {}
    functions: Functions | None = None
    parts = _HEADERS.split("\n" + text)
    # re.split with two groups: [text before, (file, function, text after) per header line...]
    for i in range(1, len(parts), 3):
        file_header, function, block = parts[i], parts[i + 1], parts[i + 2]
        if file_header is not None:
            file = by_header.get(file_header)
            functions = out.setdefault(file, {}) if file is not None else None
            continue
        if functions is None:
            continue
        current = functions.setdefault(function, dict.fromkeys(CLASS_NAMES, 0))
        for mnemonic, n in Counter(_MNEMONIC.findall(block)).items():
            if not mnemonic.startswith("//"):
                current[classify(mnemonic)] += n
    return out


# A file's header line ("<path>:\tfile format ...") or a function's ("<name>:"); an instruction line
# starts with a tab, its first word the mnemonic.
# Each is found after a newline (the listing gets one in front): a literal first character lets the
# regular-expression engine skip ahead instead of trying every position.
_HEADERS = re.compile(r"\n(?:([^\t\n<][^\n]*):\tfile format [^\n]*|<([^\n]+)>:)(?=\n|$)")
_MNEMONIC = re.compile(r"\n\t[ \t]*(\S+)")


def valid_counts(data: object, files: Sequence[Path]) -> dict[Path, Functions] | None:
    """A child's JSON answer as `parse_listing` gives it, or None when it is not one (then the caller
    parses the listing itself): only the files asked about, each {function: {every class: int}}."""
    if not isinstance(data, dict):
        return None
    by_name = {str(f): f for f in files}
    out: dict[Path, Functions] = {}
    for name, functions in data.items():
        if name not in by_name or not isinstance(functions, dict):
            return None
        for counts in functions.values():
            if (not isinstance(counts, dict) or set(counts) != set(CLASS_NAMES)
                    or not all(type(n) is int and n >= 0 for n in counts.values())):
                return None
        out[by_name[name]] = functions
    return out


def _main(argv: list[str]) -> int:
    text = sys.stdin.buffer.read().decode("utf-8", "replace")
    found = parse_listing(text, [Path(a) for a in argv])
    sys.stdout.write(json.dumps({str(path): functions for path, functions in found.items()}))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
