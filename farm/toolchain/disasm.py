"""Instruction classes in a code object's disassembly, counted with the pinned LLVM disassembler.

The farm cannot run its kernels, but it can prove what they are made of: that an attention object
really issues MFMA (CDNA) or WMMA (RDNA) instructions, how much it touches LDS, and so on. The
disassembler is `llvm-objdump` from a distribution package (pin `disassembler`); this module only
sorts the mnemonics it prints into classes.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from farm.core.errors import FarmError
from farm.core.private import private_dir
from farm.toolchain import listing
from farm.toolchain.listing import Functions, parse_listing, valid_counts
from farm.toolchain.shapes import DisassemblerPin

FIX = "install it (as root: apt-get install llvm-22; scripts/setup.sh does this) or repin with `farm pin`"
# A batch of at least this many objects has its listing parsed in a child process (listing.py run by
# `python -I -S`): ~20 ms of a child's CPU, on another core, instead of ~0.4 ms per object of the
# driver's own Python, which verifies every row of a build on one interpreter. Smaller batches (a 2-core
# machine's are 1-4 rows) are parsed in the driver, where a child would cost more CPU than it saves.
PARSE_APART_AT = 16
# The environment of every process this module starts (the disassembler, the parse child): nothing of
# the user's, the C locale.
_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C"}


def binary(entry: DisassemblerPin | None) -> Path:
    """The disassembler the pin names; one clear error when the pin has none or it is not installed."""
    if not entry or not entry.get("path"):
        raise FarmError("the toolchain pin has no disassembler (conf/toolchain/*.yaml: disassembler.path)",
                        "add `disassembler: {path: /usr/bin/llvm-objdump-22, version: ...}` or run `farm pin`")
    path = Path(str(entry["path"]))
    if not os.access(path, os.X_OK):
        raise FarmError(f"disassembler missing: {path} (pinned disassembler.path) is not an executable", FIX)
    return path


def version(path: Path) -> str:
    """'Debian LLVM version 22.1.8' (the first line of `--version` that names the version)."""
    try:
        out = subprocess.run([str(path), "--version"], capture_output=True, text=True, timeout=60,
                             env=_ENV)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FarmError(f"disassembler {path} does not run ({exc})", FIX) from None
    for line in out.stdout.splitlines():
        if "version" in line.lower():
            return line.strip()
    raise FarmError(f"disassembler {path} --version printed no version: {out.stdout or out.stderr!r}", FIX)


def installed(entry: DisassemblerPin | None) -> DisassemblerPin:
    path = binary(entry)
    return DisassemblerPin(path=str(path), version=version(path))


BATCH_TIMEOUT_S = 600.0
ALONE_TIMEOUT_S = 120.0  # one object disassembles in milliseconds; this only bounds a hostile one


@dataclass(frozen=True)
class _Listing:
    returncode: int
    stderr: str
    counts: dict[Path, Functions]  # parsed only from a clean run (returncode 0)


def _run(entry: DisassemblerPin | None, mcpu: str, files: Sequence[Path], timeout_s: float) -> _Listing | None:
    """The disassembler's run over `files`, its listing parsed; None when it did not finish in time."""
    path = binary(entry)
    command = [str(path), "-d", "--no-show-raw-insn", "--no-leading-addr", f"--mcpu={mcpu}", *map(str, files)]
    # The listing (~120-190 kB an object) goes to an unnamed file, read at once: through a pipe, Python's
    # communicate loop cost the driver ~4 ms of CPU per object, more than parsing it.
    with tempfile.TemporaryFile(dir=_scratch_dir()) as listed:
        try:
            proc = subprocess.run(command, stdout=listed, stderr=subprocess.PIPE, text=True, errors="replace",
                                  timeout=timeout_s, env=_ENV)
        except subprocess.TimeoutExpired:
            return None
        except OSError as exc:
            raise FarmError(f"disassembler {path} does not run ({exc})", FIX) from None
        if proc.returncode != 0:
            return _Listing(proc.returncode, proc.stderr, {})
        listed.seek(0)
        counts = _parse_apart(listed, files) if len(files) >= PARSE_APART_AT else None
        if counts is None:
            listed.seek(0)
            counts = parse_listing(listed.read().decode("utf-8", "replace"), files)
    return _Listing(proc.returncode, proc.stderr, counts)


def _parse_apart(listed: BinaryIO, files: Sequence[Path]) -> dict[Path, Functions] | None:
    """`parse_listing` run in a child Python on the listing file; None when the child gave no valid
    answer (the caller then parses in this process, so a broken child costs time, never a result)."""
    if not sys.executable or not os.path.isfile(listing.__file__):  # an embedded Python, a zipped farm
        return None
    command = [sys.executable, "-I", "-S", listing.__file__, *map(str, files)]
    try:
        child = subprocess.run(command, stdin=listed, capture_output=True, timeout=ALONE_TIMEOUT_S, env=_ENV)
        answer = json.loads(child.stdout) if child.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    return valid_counts(answer, files)


def _alone(entry: DisassemblerPin | None, mcpu: str, path: Path) -> Functions | str:
    """One file in a disassembler of its own, so a reason is about this file only."""
    proc = _run(entry, mcpu, [path], ALONE_TIMEOUT_S)
    if proc is None:
        return f"the disassembler did not finish within {ALONE_TIMEOUT_S:g} s"
    if proc.returncode != 0 or path not in proc.counts:
        return f"the disassembler could not read it: {_reason(proc.stderr, path)}"
    return proc.counts[path]


def _reason(stderr: str, path: Path) -> str:
    """The disassembler's message without its own name and the (often temporary) file name."""
    lines = [line.split(": ", 1)[1] if line.startswith("/") and ": " in line else line
             for line in stderr.strip().splitlines()]
    return "; ".join(line.replace(f"'{path}': ", "") for line in lines) or "no output"


def count_files(entry: DisassemblerPin | None, mcpu: str, files: Sequence[Path]) -> dict[Path, Functions | str]:
    """{file: {function: {class: count}}, or why the disassembler cannot read it}. One process serves the
    batch (its start-up, ~30 ms, is most of the cost of a small object); llvm-objdump stops at the first
    bad file, so each file without a clean batch result (every file, when the batch failed) runs alone."""
    if not files:
        return {}
    batch = _run(entry, mcpu, files, BATCH_TIMEOUT_S)
    parsed = batch.counts if batch is not None else {}
    out: dict[Path, Functions | str] = {}
    for path in files:
        named = batch is not None and f"'{path}'" in batch.stderr  # a warning or error about this file
        out[path] = parsed[path] if path in parsed and not named else _alone(entry, mcpu, path)
    return out


def count_many(entry: DisassemblerPin | None, mcpu: str, objects: Sequence[bytes]) -> list[Functions | str]:
    """Per object held in memory: {function: {class: count}}, or why it cannot be read (count_files)."""
    tmp = _scratch_dir()
    call = next(_CALLS)
    paths = [tmp / f"{call}-{i}.hsaco" for i in range(len(objects))]
    try:
        for path, data in zip(paths, objects, strict=True):
            path.write_bytes(data)
        found = count_files(entry, mcpu, paths)
        return [found[path] for path in paths]
    finally:
        for path in paths:
            path.unlink(missing_ok=True)


_CALLS = itertools.count()
# (pid, private root) -> this process's scratch directory (a forked child makes its own)
_SCRATCH: dict[tuple[int, Path], Path] = {}


def _scratch_dir() -> Path:
    """This process's directory under the user's private `disasm/`, named after it (`<pid>-...`), so one
    left behind by a killed process is recognised and removed by the next. Made once per process (a
    driver disassembles a batch at a time: a directory per call cost a mkdtemp, a sweep and an rmtree)."""
    root = private_dir("disasm")  # checked to be the user's own at every call
    key = (os.getpid(), root)
    path = _SCRATCH.get(key)
    if path is None or not path.is_dir():
        sweep_dead_scratch(root)
        path = Path(tempfile.mkdtemp(prefix=f"{key[0]}-", dir=root))
        _SCRATCH[key] = path
        atexit.register(shutil.rmtree, path, True)
    return path


def sweep_dead_scratch(root: Path) -> None:
    """Remove scratch directories whose process is gone (killed before it could clean up)."""
    for path in root.iterdir():
        pid = path.name.split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # the pid now belongs to another user: the process that was ours is gone
    return True
