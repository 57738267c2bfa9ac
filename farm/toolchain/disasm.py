"""Instruction classes in a code object's disassembly, counted with the pinned LLVM disassembler.

The farm cannot run its kernels, but it can prove what they are made of: that an attention object
really issues MFMA (CDNA) or WMMA (RDNA) instructions, how much it touches LDS, and so on. The
disassembler is `llvm-objdump` from a distribution package (pin `disassembler`); this module only
sorts the mnemonics it prints into classes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
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
    for name, prefixes in CLASSES:
        if mnemonic.startswith(prefixes):
            return name
    return OTHER


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
    """Split `llvm-objdump -d` output of several files into per-file, per-function class counts."""
    by_header = {f"{f}:": f for f in files}
    out: dict[Path, dict[str, dict[str, int]]] = {}
    current: dict[str, int] | None = None
    functions: dict[str, dict[str, int]] | None = None
    for line in text.splitlines():
        if "\tfile format " in line:
            file = by_header.get(line.split("\tfile format ")[0])
            functions = out.setdefault(file, {}) if file is not None else None
            current = None
        elif line.endswith(">:") and "<" in line and functions is not None:
            current = functions.setdefault(line[line.index("<") + 1:-2], dict.fromkeys(CLASS_NAMES, 0))
        elif line.startswith("\t") and current is not None:
            mnemonic = line.split(None, 1)[0] if line.strip() else ""
            if mnemonic and not mnemonic.startswith("//"):
                current[classify(mnemonic)] += 1
    return out


BATCH_TIMEOUT_S = 600.0
ALONE_TIMEOUT_S = 120.0  # one object disassembles in milliseconds; this only bounds a hostile one


def _run(entry: DisassemblerPin | None, mcpu: str, files: Sequence[Path],
         timeout_s: float) -> subprocess.CompletedProcess | None:
    """The disassembler's output for `files`; None when it did not finish in time."""
    path = binary(entry)
    command = [str(path), "-d", "--no-show-raw-insn", "--no-leading-addr", f"--mcpu={mcpu}", *map(str, files)]
    try:
        return subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=timeout_s,
                              env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C"})
    except subprocess.TimeoutExpired:
        return None
    except OSError as exc:
        raise FarmError(f"disassembler {path} does not run ({exc})", FIX) from None


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
    try:
        paths = [tmp / f"object{i}.hsaco" for i in range(len(objects))]
        for path, data in zip(paths, objects, strict=True):
            path.write_bytes(data)
        found = count_files(entry, mcpu, paths)
        return [found[path] for path in paths]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _scratch_dir() -> Path:
    """A fresh directory under the user's private `disasm/`, named after this process (`<pid>-...`), so
    one left behind by a killed process is recognised and removed by the next."""
    root = private_dir("disasm")
    sweep_dead_scratch(root)
    return Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root))


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
