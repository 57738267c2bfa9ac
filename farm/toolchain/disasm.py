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
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from farm.core.errors import FarmError
from farm.core.private import private_dir
from farm.elf import structure
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


# One object disassembles in 10-30 ms (the largest of the table, 22.7 kB, too); a batch is given that per
# object on top. These only stop a tool that a hostile object sent astray.
ALONE_TIMEOUT_S = 20.0
BATCH_TIMEOUT_PER_FILE_S = 0.25
# What the disassembler may write, per file given: LISTING_BYTES_PER_BYTE times the file's size plus
# LISTING_FLOOR_BYTES. The most a real object's listing takes is ~12 bytes a byte (sdpa d256: 268 kB from
# 22.7 kB); past the limit the kernel stops the tool (RLIMIT_FSIZE), so neither disk nor memory fills up.
LISTING_BYTES_PER_BYTE = 64
LISTING_FLOOR_BYTES = 1 << 20
# What is read of its messages (a real run prints none; a hostile object made it print one without end).
MESSAGE_BYTES = 64 << 10
MALFORMED = "malformed ELF, not given to the disassembler"
MESSAGES_SHOWN = 3  # distinct message lines put in a reason


@dataclass(frozen=True)
class _Listing:
    returncode: int | None  # None: stopped (see `stopped`)
    stderr: str  # its first MESSAGE_BYTES
    counts: dict[Path, Functions]  # parsed only from a clean run (returncode 0)
    stopped: str | None = None  # why the run was cut short: too long, or too much output
    clipped: bool = False  # it printed more messages than were read


def _run(entry: DisassemblerPin | None, mcpu: str, files: Sequence[Path], timeout_s: float) -> _Listing:
    """The disassembler's run over `files`, its listing parsed."""
    path = binary(entry)
    command = [str(path), "-d", "--no-show-raw-insn", "--no-leading-addr", f"--mcpu={mcpu}", *map(str, files)]
    limit = sum(LISTING_FLOOR_BYTES + LISTING_BYTES_PER_BYTE * _size(f) for f in files)
    # The listing (~120-270 kB an object) and the messages go to unnamed files, read at once: through a
    # pipe, Python's communicate loop cost the driver ~4 ms of CPU per object, more than parsing it.
    scratch = _scratch_dir()
    with tempfile.TemporaryFile(dir=scratch) as listed, tempfile.TemporaryFile(dir=scratch) as messages:
        returncode = _bounded(command, listed, messages, limit, timeout_s)
        messages.seek(0)
        stderr = messages.read(MESSAGE_BYTES).decode("utf-8", "replace")
        clipped = os.fstat(messages.fileno()).st_size > MESSAGE_BYTES
        written = max(os.fstat(listed.fileno()).st_size, os.fstat(messages.fileno()).st_size)
        if returncode is None:
            return _Listing(None, stderr, {}, f"did not finish within {timeout_s:g} s (stopped)", clipped)
        if written >= limit:  # the kernel stopped it there (or it stopped on its own, the listing cut)
            return _Listing(None, stderr, {}, f"printed {limit} bytes, far more than any real object's listing "
                            "(stopped)", clipped)
        if returncode != 0:
            return _Listing(returncode, stderr, {}, None, clipped)
        listed.seek(0)
        counts = _parse_apart(listed, files) if len(files) >= PARSE_APART_AT else None
        if counts is None:
            listed.seek(0)
            counts = parse_listing(listed.read().decode("utf-8", "replace"), files)
    return _Listing(returncode, stderr, counts, None, clipped)


def _bounded(command: list[str], stdout: BinaryIO, stderr: BinaryIO, limit: int, timeout_s: float) -> int | None:
    """Run `command` writing at most `limit` bytes to any file, for at most `timeout_s`; its exit status, or
    None when it ran out of time (its process group is then killed)."""
    try:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=_ENV,
                                process_group=0)
    except OSError as exc:
        raise FarmError(f"disassembler {command[0]} does not run ({exc})", FIX) from None
    try:
        # Set from outside (a preexec_fn would stop the fast spawn and is unsafe with threads): the kernel
        # checks it at each write, so even bytes written before it was set cannot carry a file past it.
        resource.prlimit(proc.pid, resource.RLIMIT_FSIZE, (limit, limit))
    except ProcessLookupError:
        pass  # already gone: it wrote what it wrote, measured by the caller
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # not reaped yet: the group is still this child's
        proc.wait()
        return None


def _size(path: Path) -> int:
    """The file's size for the output limit (0 for one that cannot be read: the tool names it)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _parse_apart(listed: BinaryIO, files: Sequence[Path]) -> dict[Path, Functions] | None:
    """`parse_listing` run in a child Python on the listing file (bounded by the disassembler's output
    limit); None when the child gave no valid answer (the caller then parses in this process, so a broken
    child costs time, never a result)."""
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
    if proc.stopped:
        return f"the disassembler {proc.stopped}: {_reason(proc.stderr, path, proc.clipped)}"
    if proc.returncode != 0 or path not in proc.counts:
        return f"the disassembler could not read it: {_reason(proc.stderr, path, proc.clipped)}"
    return proc.counts[path]


def _reason(stderr: str, path: Path, clipped: bool = False) -> str:
    """The disassembler's message without its own name and the (often temporary) file name; the same line
    printed again and again is given once."""
    printed = stderr.strip().splitlines()
    if clipped and len(printed) > 1:
        printed.pop()  # cut off where reading stopped
    lines = [line.split(": ", 1)[1] if line.startswith("/") and ": " in line else line for line in printed]
    unique = dict.fromkeys(line.replace(f"'{path}': ", "") for line in lines)
    shown = list(unique)[:MESSAGES_SHOWN]
    more = " ..." if clipped or len(unique) > len(shown) else ""
    return "; ".join(shown) + more if shown else "no output"


def count_files(entry: DisassemblerPin | None, mcpu: str, files: Sequence[Path]) -> dict[Path, Functions | str]:
    """{file: {function: {class: count}}, or why the disassembler cannot read it}. A file whose ELF
    structure is unsound (farm/elf/structure.py) never reaches the disassembler."""
    found: dict[Path, Functions | str] = {}
    sound = []
    for path in files:
        problem = _structure_problem(path)
        if problem:
            found[path] = f"{MALFORMED}: {problem}"
        else:
            sound.append(path)
    found.update(_count_sound(entry, mcpu, sound))
    return {path: found[path] for path in files}


def _structure_problem(path: Path) -> str | None:
    try:
        with path.open("rb") as file:
            data = file.read(structure.MAX_OBJECT_BYTES + 1)  # one byte more: a larger file is named as such
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return structure.problem(data)


def _count_sound(entry: DisassemblerPin | None, mcpu: str, files: Sequence[Path]) -> dict[Path, Functions | str]:
    """count_files for files already checked. One process serves the batch (its start-up, ~30 ms, is most
    of the cost of a small object); llvm-objdump stops at the first bad file, so each file without a clean
    batch result (every file, when the batch failed or was stopped) runs alone."""
    if not files:
        return {}
    batch = _run(entry, mcpu, files, ALONE_TIMEOUT_S + BATCH_TIMEOUT_PER_FILE_S * len(files))
    trusted = not batch.stopped and not batch.clipped  # clipped: a warning about a file may be unread
    out: dict[Path, Functions | str] = {}
    for path in files:
        named = f"'{path}'" in batch.stderr  # a warning or error about this file
        clean = trusted and path in batch.counts and not named
        out[path] = batch.counts[path] if clean else _alone(entry, mcpu, path)
    return out


def count_many(entry: DisassemblerPin | None, mcpu: str, objects: Sequence[bytes]) -> list[Functions | str]:
    """Per object held in memory: {function: {class: count}}, or why it cannot be read (count_files)."""
    problems = [structure.problem(data) for data in objects]
    tmp = _scratch_dir()
    call = next(_CALLS)
    paths = [tmp / f"{call}-{i}.hsaco" for i in range(len(objects))]
    sound = [path for path, problem in zip(paths, problems, strict=True) if problem is None]
    try:
        for path, data, problem in zip(paths, objects, problems, strict=True):
            if problem is None:
                path.write_bytes(data)
        found = _count_sound(entry, mcpu, sound)
        pairs = zip(paths, problems, strict=True)
        return [f"{MALFORMED}: {problem}" if problem else found[path] for path, problem in pairs]
    finally:
        for path in sound:
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
