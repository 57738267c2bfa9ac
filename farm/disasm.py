"""Instruction classes in a code object's disassembly, counted with the pinned LLVM disassembler.

The farm cannot run its kernels, but it can prove what they are made of: that an attention object
really issues MFMA (CDNA) or WMMA (RDNA) instructions, how much it touches LDS, and so on. The
disassembler is `llvm-objdump` from a distribution package (pin `disassembler`); this module only
sorts the mnemonics it prints into classes.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import FarmError

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
FIX = "install it (as root: apt-get install llvm-22; scripts/setup.sh does this) or repin with `farm pin`"


def classify(mnemonic: str) -> str:
    for name, prefixes in CLASSES:
        if mnemonic.startswith(prefixes):
            return name
    return OTHER


def binary(entry: dict[str, Any] | None) -> Path:
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


def installed(entry: dict[str, Any] | None) -> dict[str, Any]:
    path = binary(entry)
    return {"path": str(path), "version": version(path)}


def _parse(text: str, files: Sequence[Path]) -> dict[Path, dict[str, dict[str, int]]]:
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


def _run(entry: dict[str, Any] | None, mcpu: str, files: Sequence[Path]) -> subprocess.CompletedProcess:
    command = [str(binary(entry)), "-d", "--no-show-raw-insn", "--no-leading-addr", f"--mcpu={mcpu}",
               *map(str, files)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C"})


def count_files(entry: dict[str, Any] | None, mcpu: str, files: Sequence[Path]) -> dict[Path, dict[str, dict]]:
    """{file: {function: {class: count}}} for the files the disassembler could read, in one process.
    A file missing from the result could not be disassembled; `count_many` names the reason."""
    return _parse(_run(entry, mcpu, files).stdout, files) if files else {}


def count_many(entry: dict[str, Any] | None, mcpu: str, objects: Sequence[bytes]) -> list[dict[str, dict] | str]:
    """Per object held in memory: {function: {class: count}}, or why it cannot be read. One disassembler
    process serves the whole batch (its start-up, ~30 ms, is most of the cost of a small object)."""
    out: list[dict[str, dict] | str] = []
    with tempfile.TemporaryDirectory(prefix="farm-disasm-") as tmp:
        paths = [Path(tmp) / f"object{i}.hsaco" for i in range(len(objects))]
        for path, data in zip(paths, objects, strict=True):
            path.write_bytes(data)
        found = count_files(entry, mcpu, paths)
        for path in paths:
            if path not in found:  # again alone, so the disassembler's message is about this object
                alone = _run(entry, mcpu, [path])
                parsed = _parse(alone.stdout, [path])
                if alone.returncode != 0 or path not in parsed:
                    out.append(f"the disassembler could not read it: {alone.stderr.strip() or 'no output'}")
                    continue
                found[path] = parsed[path]
            out.append(found[path])
    return out
