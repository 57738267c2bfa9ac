"""Bytecode for the kernel sources of a compile's private directory, compiled once per worker process.

Every row's compile imports its kernel modules from a fresh private directory, so without a cache the
compile process parsed and compiled every kernel module from source, every row (~15-25 ms of an RMSNorm
row's front end on a loaded 2-core machine). The worker compiles each distinct source once, keeps the
bytecode in memory, and writes it beside the sources as a *checked hash-based* pyc (PEP 552): at every
import the interpreter hashes the source it reads and uses the pyc only when that hash matches the one
in it, else it compiles the source as before. So a changed source is never run from stale bytecode,
whatever this cache holds; and the cache itself is keyed by the source's bytes too.

The code is the same as an import from source would make: `compile(source, path, "exec",
dont_inherit=True)` as the import system calls it, with the file name then set by the import system to
the file it imported (`co_filename` of every function follows the private copy, as before). Only
optimisation level 0 is written (`x.cpython-311.pyc`): an interpreter running with -O looks for another
name and compiles from source. A source that does not compile, or whose compiling warns (a SyntaxWarning
the compile's log would show), gets no pyc: the compile process compiles it and reports it as before.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import warnings
from pathlib import Path

# PEP 552 flags word: bit 0 = hash-based, bit 1 = check the source against the hash at import.
CHECKED_HASH = 0b11

# (relative path, SHA256 of the source) -> pyc bytes, or None: none for that source. Per worker process
# (a Ray actor lives for the build).
_PYC: dict[tuple[str, str], bytes | None] = {}


def pyc_bytes(source: bytes, path: str) -> bytes | None:
    """A checked hash-based pyc of `source` compiled as the import system would compile file `path`; None
    when it does not compile cleanly (an error or a warning)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            code = compile(source, path, "exec", dont_inherit=True, optimize=0)
        except (SyntaxError, ValueError):
            return None
    if caught:
        return None
    return (importlib.util.MAGIC_NUMBER + CHECKED_HASH.to_bytes(4, "little")
            + importlib.util.source_hash(source) + marshal.dumps(code))


def write_bytecode(sources: dict[str, bytes], root: Path) -> None:
    """Beside each Python source of `sources` written under `root`, its pyc (where the import system looks)."""
    for rel, data in sources.items():
        if not rel.endswith(".py"):
            continue
        key = (rel, hashlib.sha256(data).hexdigest())
        if key not in _PYC:
            _PYC[key] = pyc_bytes(data, str(root / rel))
        pyc = _PYC[key]
        if pyc is None:
            continue
        cached = Path(importlib.util.cache_from_source(str(root / rel), optimization=""))
        cached.parent.mkdir(exist_ok=True)
        cached.write_bytes(pyc)
