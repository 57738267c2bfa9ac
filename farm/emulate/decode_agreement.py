"""Does the decoder the ISA models run on (amdgpu_models.disasm: llvm-mc) read every shipped object as
LLVM's independent listing (`llvm-objdump -d`) does? Instruction by instruction: address, encoding words,
mnemonic and operands.

    python -m farm.emulate.decode_agreement outputs [more dirs or .hsaco files] [--jobs N]

Only presentation is normalised: runs of whitespace, objdump's `// address: words` comments (read, and
compared as address and encoding) and label lines; a branch's offset is compared as the address it
reaches (llvm-mc's `s_cbranch_scc1 440` is PC + 4 + 4 * 440; objdump's `<symbol+offset>` annotation, when
printed, must name the same address). An object either side cannot read is a disagreement, never skipped.
Prints the first disagreements, then one line
`decode agreement: N of M instructions in K objects agree ... (P%); by target: ...`, and exits 0 only when
every instruction of at least one object agrees. Objects are independent: a process per core.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import struct
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from amdgpu_models.disasm import Imm, Instruction, Undecodable
from farm.core.errors import FarmError
from farm.emulate import objdump_listing
from farm.emulate.isa import MATTR, NotDecodable, Tools, decode_object, target_of, tools
from farm.emulate.objdump_listing import Listed, ListingFailed
from farm.table import config as config_mod
from farm.table.model import Target

SHOWN_PER_OBJECT = 3  # disagreements kept per object
SHOWN = 10  # printed before the summary line
# MCInst opcodes whose last operand is a 16-bit word offset from the next instruction.
BRANCHES = ("S_BRANCH", "S_CBRANCH_", "S_CALL_B64")
FIELDS = "address, encoding, mnemonic and operands"


@dataclass(frozen=True)
class ObjectAgreement:
    path: str
    target: str  # "?" when not even the target could be read
    total: int
    agreed: int
    disagreements: tuple[str, ...]  # the first few, one line each


def branch_target(inst: Instruction) -> int | None:
    """Where a branch goes (its simm16 in words from the next instruction); None for other instructions."""
    if not inst.opcode.startswith(BRANCHES) or not inst.mc_operands or not isinstance(inst.mc_operands[-1], Imm):
        return None
    offset = inst.mc_operands[-1].value & 0xFFFF
    return inst.address + 4 + 4 * (offset - 0x10000 if offset & 0x8000 else offset)


def _words(encoding: bytes) -> str:
    if len(encoding) % 4:
        return encoding.hex()
    return " ".join(f"{w:08X}" for w in struct.unpack(f"<{len(encoding) // 4}I", encoding))


def _normal(text: str) -> str:
    return " ".join(text.split())


def _with_target(operands: str, target: int) -> str:
    """The operand text with its last operand (the branch offset) replaced by the address it reaches."""
    head, comma, _ = operands.rpartition(",")
    return f"{head}{comma} @{target:#x}" if comma else f"@{target:#x}"


def _their_target(listed: Listed) -> int | None:
    """The address objdump's last operand reaches: an offset in words (as llvm-mc prints it) from the next
    instruction, or a `<symbol+offset>` label (resolved in objdump_listing, given as `annotated`)."""
    last = listed.operands.rpartition(",")[2].strip()
    if last.startswith("<"):
        return listed.annotated
    try:
        offset = int(last, 0)
    except ValueError:
        return None
    if listed.address is None:
        return None
    offset &= 0xFFFF
    return listed.address + 4 + 4 * (offset - 0x10000 if offset & 0x8000 else offset)


def differences(ours: Instruction, theirs: Listed) -> list[str]:
    """The fields on which the two readings of one instruction differ (empty: they agree)."""
    found = []
    if ours.address != theirs.address:
        found.append("address")
    if _words(ours.encoding) != theirs.words:
        found.append("encoding")
    if ours.mnemonic != theirs.mnemonic:
        found.append("mnemonic")
    target = branch_target(ours)
    if target is None:
        if _normal(ours.operands) != _normal(theirs.operands):
            found.append("operands")
        if theirs.annotation is not None:
            found.append("a target annotation on what llvm-mc does not read as a branch")
    else:
        their_target = _their_target(theirs)
        same = their_target is not None and \
            _normal(_with_target(ours.operands, target)) == _normal(_with_target(theirs.operands, their_target))
        if not same:
            found.append("operands")
        if theirs.annotation is not None and theirs.annotated != target:
            found.append(f"branch target (objdump's <{theirs.annotation}>)")
    return found


def _describe(ours: Instruction | None, theirs: Listed | None, fields: list[str]) -> str:
    mine = f"{ours.address:#x} {ours.text} [{_words(ours.encoding)}]" if ours else "nothing"
    other = _normal(theirs.line) if theirs else "nothing"
    return f"{', '.join(fields)}: llvm-mc {mine} | llvm-objdump {other}"


def compare(ours: Sequence[Instruction], theirs: Sequence[Listed]) -> tuple[int, int, list[str]]:
    """(instructions, agreeing, the first disagreements), pairing the two listings in order."""
    total = agreed = 0
    shown: list[str] = []
    for mine, other in itertools.zip_longest(ours, theirs):
        total += 1
        fields = differences(mine, other) if mine is not None and other is not None else ["missing"]
        if not fields:
            agreed += 1
        elif len(shown) < SHOWN_PER_OBJECT:
            shown.append(_describe(mine, other, fields))
    return total, agreed, shown


def check_object(path: Path, found: Tools, targets: dict[str, Target]) -> ObjectAgreement:
    """One object, decoded by amdgpu_models and listed by llvm-objdump, compared. An object either side
    cannot read counts as that many instructions (at least one), none agreeing."""
    target, theirs = "?", []
    try:
        data = path.read_bytes()
        target = target_of(data, targets)
        theirs = objdump_listing.parse(objdump_listing.listing(found.objdump, target, MATTR.get(target, ""), path))
        decoded = decode_object(data, targets, found.llvm_mc)
    except (OSError, NotDecodable, ListingFailed, Undecodable, FarmError) as exc:  # FarmError: a tool failed on it
        return ObjectAgreement(str(path), target, max(1, len(theirs)), 0, (f"{type(exc).__name__}: {exc}",))
    total, agreed, shown = compare(decoded.instructions, theirs)
    return ObjectAgreement(str(path), target, total, agreed, tuple(shown))


def _check_one(job: tuple[Path, Tools, dict[str, Target]]) -> ObjectAgreement:
    return check_object(*job)


def agreement(paths: Sequence[Path], found: Tools, targets: dict[str, Target], jobs: int) -> list[ObjectAgreement]:
    """Every object's agreement, in the order given (jobs=1: in this process)."""
    work = [(path, found, targets) for path in paths]
    if jobs <= 1 or len(work) <= 1:
        return [_check_one(job) for job in work]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(_check_one, work, chunksize=max(1, min(16, len(work) // (4 * jobs)))))


def summary(results: Sequence[ObjectAgreement], seconds: float | None = None) -> str:
    total = sum(r.total for r in results)
    agreed = sum(r.agreed for r in results)
    by_target: dict[str, list[ObjectAgreement]] = {}
    for r in results:
        by_target.setdefault(r.target, []).append(r)
    parts = []
    for name in sorted(by_target):
        rs = by_target[name]
        parts.append(f"{name} {sum(r.agreed for r in rs):,} of {sum(r.total for r in rs):,} in {len(rs)} objects")
    line = (f"decode agreement: {agreed:,} of {total:,} instructions in {len(results)} objects agree with "
            f"llvm-objdump on {FIELDS} ({_percent(agreed, total)}); by target: {', '.join(parts) or 'none'}")
    return line + (f"; {seconds:.1f} s" if seconds is not None else "")


def _percent(part: int, whole: int) -> str:
    """Rounded down: 100.00% only when all agree."""
    return f"{math.floor(10000 * part / whole) / 100:.2f}%" if whole else "n/a"


def objects_in(places: Sequence[Path]) -> list[Path]:
    """The .hsaco files named, and those under the directories named (sorted; symlinks not followed)."""
    found: list[Path] = []
    for place in places:
        if place.is_dir() and not place.is_symlink():
            found += sorted(p for p in place.rglob("*.hsaco") if p.is_file() and not p.is_symlink())
        elif place.is_file():
            found.append(place)
        else:
            raise FarmError(f"{place} is neither a directory nor a file", "name outputs/ or .hsaco files")
    return found


def default_jobs() -> int:
    return len(os.sched_getaffinity(0))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m farm.emulate.decode_agreement", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("places", nargs="+", type=Path, help="directories (searched for .hsaco) or objects")
    parser.add_argument("--jobs", type=int, default=default_jobs(), help="processes (default: the cores)")
    args = parser.parse_args(argv)
    try:
        cfg = config_mod.load(config_mod.find_project_root(), [])
        found = tools(cfg.toolchain_pin.get("disassembler"))
        paths = objects_in(args.places)
        started = time.monotonic()
        results = agreement(paths, found, cfg.targets, args.jobs)
    except FarmError as exc:
        print(f"decode agreement: error: {exc}", file=sys.stderr)
        return 2
    seconds = time.monotonic() - started
    wrong = [r for r in results if r.agreed != r.total]
    if wrong:
        print(f"first disagreements ({len(wrong)} objects):")
        lines = [f"  {r.path}: {d}" for r in wrong for d in r.disagreements]
        print("\n".join(lines[:SHOWN]))
    print(summary(results, seconds))
    total = sum(r.total for r in results)
    return 0 if total and not wrong else 1


if __name__ == "__main__":
    sys.exit(main())
