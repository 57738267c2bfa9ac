"""Instruction classes in a code object's disassembly, counted with the pinned LLVM disassembler.

The farm cannot run its kernels, but it can prove what they are made of: that an attention object
really issues MFMA (CDNA) or WMMA (RDNA) instructions, how much it touches LDS, and so on. The
disassembler is `llvm-objdump` from a distribution package (pin `disassembler`); this module only
sorts the mnemonics it prints into classes.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from farm.core.errors import FarmError
from farm.core.private import private_dir
from farm.toolchain.shapes import DisassemblerPin

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
FIX = "install it (as root: apt-get install llvm-22; scripts/setup.sh does this) or repin with `farm pin`"


def classify(mnemonic: str) -> str:
    known = _CLASSIFIED.get(mnemonic)
    if known is None:
        known = next((name for name, prefixes in CLASSES if mnemonic.startswith(prefixes)), OTHER)
        if len(_CLASSIFIED) < 100_000:  # a hostile listing cannot grow it without bound
            _CLASSIFIED[mnemonic] = known
    return known


# mnemonic -> class: an object's listing repeats a few hundred mnemonics thousands of times.
_CLASSIFIED: dict[str, str] = {}


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
                             env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise FarmError(f"disassembler {path} does not run ({exc})", FIX) from None
    for line in out.stdout.splitlines():
        if "version" in line.lower():
            return line.strip()
    raise FarmError(f"disassembler {path} --version printed no version: {out.stdout or out.stderr!r}", FIX)


def installed(entry: DisassemblerPin | None) -> DisassemblerPin:
    path = binary(entry)
    return DisassemblerPin(path=str(path), version=version(path))


def parse_listing(text: str, files: Sequence[Path]) -> dict[Path, dict[str, dict[str, int]]]:
    """Split `llvm-objdump -d` output of several files into per-file, per-function class counts.
    The listing is cut at its file and function header lines; each function's mnemonics are counted
    with one regular-expression pass and classified once per distinct mnemonic (a batch's listing holds
    hundreds of thousands of instructions: a Python step per line cost the driver most of its verify)."""
    by_header = {str(f): f for f in files}
    out: dict[Path, dict[str, dict[str, int]]] = {}
    functions: dict[str, dict[str, int]] | None = None
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


BATCH_TIMEOUT_S = 600.0
ALONE_TIMEOUT_S = 120.0  # one object disassembles in milliseconds; this only bounds a hostile one


def _run(entry: DisassemblerPin | None, mcpu: str, files: Sequence[Path],
         timeout_s: float) -> subprocess.CompletedProcess | None:
    """The disassembler's output for `files`; None when it did not finish in time."""
    path = binary(entry)
    command = [str(path), "-d", "--no-show-raw-insn", "--no-leading-addr", f"--mcpu={mcpu}", *map(str, files)]
    # The listing (~190 kB an object) goes to an unnamed file, read at once: through a pipe, Python's
    # communicate loop cost the driver ~4 ms of CPU per object, more than parsing it.
    with tempfile.TemporaryFile(dir=_scratch_dir()) as listing:
        try:
            proc = subprocess.run(command, stdout=listing, stderr=subprocess.PIPE, text=True, errors="replace",
                                  timeout=timeout_s, env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent",
                                                          "LC_ALL": "C"})
        except subprocess.TimeoutExpired:
            return None
        except OSError as exc:
            raise FarmError(f"disassembler {path} does not run ({exc})", FIX) from None
        listing.seek(0)
        proc.stdout = listing.read().decode("utf-8", "replace")
    return proc


def _alone(entry: DisassemblerPin | None, mcpu: str, path: Path) -> Functions | str:
    """One file in a disassembler of its own, so a reason is about this file only."""
    proc = _run(entry, mcpu, [path], ALONE_TIMEOUT_S)
    if proc is None:
        return f"the disassembler did not finish within {ALONE_TIMEOUT_S:g} s"
    parsed = parse_listing(proc.stdout, [path])
    if proc.returncode != 0 or path not in parsed:
        return f"the disassembler could not read it: {_reason(proc.stderr, path)}"
    return parsed[path]


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
    clean = batch is not None and batch.returncode == 0
    parsed = parse_listing(batch.stdout, files) if clean and batch is not None else {}
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
