"""An `llvm-objdump -d` listing of an AMDGPU object, instruction by instruction, with what it says about
each: the address and raw words from its `// address: words` comment, the asm text before it, and the
target of a branch's `<symbol+offset>` annotation resolved through the listing's own label lines.

The independent side of farm/emulate/decode_agreement.py: nothing here comes from amdgpu_models.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from farm.core.errors import FarmError
from farm.toolchain.disasm import FIX

TIMEOUT_S = 60.0
_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "LC_ALL": "C"}


@dataclass(frozen=True)
class Listed:
    """One instruction line. `address` is None when its comment could not be read (then it agrees with
    nothing)."""

    line: str  # as printed, for messages
    address: int | None
    words: str  # the raw words as printed, "BFA201B8" or "F4000080 F8000020"
    mnemonic: str
    operands: str
    annotated: int | None  # the address the `<symbol+offset>` annotation names (branches)
    annotation: str | None  # the annotation as printed, when there is one


def listing(objdump: Path, mcpu: str, mattr: str, path: Path) -> str:
    """`llvm-objdump -d --mcpu=...` of one object (raw words and addresses in its comments: the default)."""
    command = [str(objdump), "-d", f"--mcpu={mcpu}", *([f"--mattr={mattr}"] if mattr else []), str(path)]
    try:
        proc = subprocess.run(command, capture_output=True, text=True, env=_ENV, timeout=TIMEOUT_S, check=False)
    except OSError as exc:
        raise FarmError(f"disassembler {objdump} does not run ({exc})", FIX) from None
    except subprocess.TimeoutExpired:
        raise FarmError(f"disassembler {objdump} did not finish {path} within {TIMEOUT_S:g} s",
                        "run it by hand on that object") from None
    if proc.returncode != 0 or proc.stderr.strip():
        raise ListingFailed(f"llvm-objdump -d exited with {proc.returncode}: {proc.stderr.strip()[:300]}")
    return proc.stdout


class ListingFailed(ValueError):
    """llvm-objdump did not give a clean listing of the object."""


_LABEL = re.compile(r"^([0-9a-f]{16}) <(.+)>:$")
_COMMENT = re.compile(r"\s*([0-9A-F]+): ((?:[0-9A-F]{8} )*[0-9A-F]{8})(?: <([^>\n]+)>)?\s*")
_SYMBOL_OFFSET = re.compile(r"(.+?)(?:([+-])0x([0-9a-f]+))?")


def parse(text: str) -> list[Listed]:
    """The instruction lines of a listing, in order."""
    labels: dict[str, int] = {}
    found: list[tuple[str, int | None, str, str, str, str | None]] = []
    for line in text.splitlines():
        label = _LABEL.match(line)
        if label:
            labels.setdefault(label.group(2), int(label.group(1), 16))
            continue
        if not line.startswith("\t"):
            continue  # the file and section headers, blank lines
        asm, sep, comment = line.rpartition("//")
        words = _COMMENT.fullmatch(comment) if sep else None
        asm = asm if sep else line
        mnemonic, _, operands = asm.strip().partition(" ")
        if words is None:
            found.append((line, None, "", mnemonic, operands, None))
        else:
            found.append((line, int(words.group(1), 16), words.group(2), mnemonic, operands, words.group(3)))
    return [Listed(line, address, words, mnemonic, operands.strip(), _resolve(annotation, labels), annotation)
            for line, address, words, mnemonic, operands, annotation in found]


def _resolve(annotation: str | None, labels: dict[str, int]) -> int | None:
    """`name+0x6f4` -> the label's address plus the offset (None: no annotation, or a name not listed)."""
    if annotation is None:
        return None
    name, sign, offset = _SYMBOL_OFFSET.fullmatch(annotation).groups()  # type: ignore[union-attr]
    if name not in labels:
        return None
    delta = int(offset, 16) if offset else 0
    return labels[name] + (-delta if sign == "-" else delta)
