"""The farm's side of `amdgpu_models`: where LLVM's tools are, what an object is decoded as, and the farm's
error for a tool that is missing.

The decoder is `llvm-mc` of the same LLVM install as the pinned disassembler (both come with the Debian
`llvm-22` package scripts/setup.sh installs): found beside the pin's `llvm-objdump-22`, never by a
path of its own. An object's `-mcpu` is the target whose `elf_machine` (conf/target/*.yaml) its e_flags
name; `-mattr` adds what the compiler assumed and the disassembler does not (MATTR).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from amdgpu_models.disasm import Instruction, ToolFailed, ToolMissing, disassemble
from amdgpu_models.isa import gfx12
from farm.core.errors import FarmError
from farm.elf import image
from farm.elf.code_object import NotACodeObject, read_code_object
from farm.table.model import Target
from farm.toolchain.disasm import FIX, binary
from farm.toolchain.shapes import DisassemblerPin

# Target features the objects are compiled with that LLVM 22's disassembler does not assume for the cpu, as
# the ISA table says (gfx12's Isa.mattr: FlyDSL's LLVM lowers 16-bit gfx12 code with real true16, 16-bit
# operands in either half of a VGPR, `v_mov_b16_e32 v12.h, 0`; without +real-true16 both llvm-mc-22 and
# llvm-objdump-22 decode no instruction from those words: objdump prints `.long 0x7f183880`). For gfx11
# LLVM 22 assumes it already.
MATTR: dict[str, str] = {gfx12.MCPU: gfx12.ISA.mattr}


@dataclass(frozen=True)
class Tools:
    objdump: Path  # the pinned disassembler
    llvm_mc: Path  # its sibling, the decoder


def tools(pin: DisassemblerPin | None) -> Tools:
    """The pinned llvm-objdump and the llvm-mc beside it; one FarmError naming the missing one."""
    objdump = binary(pin)
    llvm_mc = objdump.with_name(objdump.name.replace("objdump", "mc"))
    if llvm_mc == objdump or not llvm_mc.is_file():
        raise FarmError(f"llvm-mc missing: {llvm_mc} (beside the pinned disassembler {objdump}) is not there", FIX)
    return Tools(objdump, llvm_mc)


class NotDecodable(ValueError):
    """The object cannot be decoded at all (not a code object, no .text, a machine no target names)."""


@dataclass(frozen=True)
class Decoded:
    target: str  # the -mcpu
    mattr: str
    instructions: list[Instruction]


def target_of(data: bytes, targets: dict[str, Target]) -> str:
    """The target whose elf_machine the object's e_flags name."""
    try:
        mach = read_code_object(data).mach
    except NotACodeObject as exc:
        raise NotDecodable(str(exc)) from None
    named = [name for name, target in targets.items() if target.elf_machine == mach]
    if len(named) != 1:
        raise NotDecodable(f"e_flags machine 0x{mach:03x} is {'no' if not named else 'more than one'} "
                           "target's elf_machine (conf/target/)")
    return named[0]


def text_of(data: bytes) -> tuple[bytes, int]:
    """The `.text` section's bytes and address, read by farm/elf/image.py."""
    try:
        text = image.read(data).section(".text")
    except image.Unreadable as exc:
        raise NotDecodable(f"not a readable ELF file ({exc})") from None
    if text is None:
        raise NotDecodable("the object has no .text section")
    return text.data, text.addr


def decode_object(data: bytes, targets: dict[str, Target], llvm_mc: Path) -> Decoded:
    """Every instruction of the object's .text. amdgpu_models.disasm.Undecodable (a fact about the
    object) passes through; a tool that is missing or fails is a FarmError."""
    target = target_of(data, targets)
    code, address = text_of(data)
    mattr = MATTR.get(target, "")
    try:
        return Decoded(target, mattr, disassemble(code, address, target, llvm_mc, mattr))
    except ToolMissing as exc:
        raise FarmError(str(exc), FIX) from None
    except ToolFailed as exc:
        raise FarmError(f"llvm-mc failed: {exc}", "check the llvm-22 install (scripts/setup.sh)") from None
