"""Machine code to instructions, as LLVM's own AMDGPU disassembler decodes it.

`disassemble(code, base_address, mcpu, llvm_mc)` runs `llvm-mc --disassemble -show-inst -show-encoding`
once over the whole blob (written on its stdin as the `0x..` byte text llvm-mc reads, on one line: llvm-mc
never decodes across lines) and parses what it prints per instruction:

    <TAB>v_add_f32_e32 v0, 0x40490fdb, v1        ; encoding: [0xff,0x02,0x00,0x06,0xdb,0x0f,0x49,0x40]
                                            ; <MCInst #35904 V_ADD_F32_e32_gfx11
                                            ;  <MCOperand Reg:VGPR0>
                                            ;  <MCOperand Imm:1078530011>
                                            ;  <MCOperand Reg:VGPR1>>

The opcode name (`V_ADD_F32_e32_gfx11`) and the operands come from LLVM's instruction tables for that
`-mcpu`, so no opcode number or field layout is written down here. The sizes must tile the blob exactly: a
byte llvm-mc cannot decode (its "invalid instruction encoding" warning), a gap or an overlap raises
`Undecodable` naming the address and the bytes there; nothing is skipped.

The printed encoding is the MCInst encoded again, not the bytes read: it clears fields the instruction does
not use (a VOP3 compare's src2, say). An instruction's `encoding` is therefore its own bytes from the blob,
and any instruction whose printed encoding differs from them is decoded once more from those bytes alone
(one more run for all of them) and must come back as the same single instruction of the same size.
"""

from __future__ import annotations

import itertools
import re
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

TRIPLE = "amdgcn-amd-amdhsa"
TIMEOUT_S = 120.0  # the largest real object (22.7 kB of .text) takes ~0.03 s; only a runaway tool hits this
# The tool runs with nothing of the caller's environment but a C locale (its messages are parsed).
_ENV = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
_HEX = [f"0x{b:02x}" for b in range(256)]
_TOKEN = 5  # "0xNN " per byte on the input line: a message's column gives the byte's offset


class DecodeError(Exception):
    """Any failure to decode (the farm reports it as its own error)."""


class Undecodable(DecodeError):
    """Bytes the disassembler cannot decode as an instruction."""

    def __init__(self, address: int, data: bytes, why: str) -> None:
        self.address = address
        self.data = data
        super().__init__(f"cannot decode the bytes at {address:#x} ({data.hex(' ') or 'none'}): {why}")


class ToolMissing(DecodeError):
    """The disassembler (llvm-mc) is not installed where it was looked for."""

    def __init__(self, tool: Path) -> None:
        self.tool = tool
        super().__init__(f"llvm-mc not found: {tool} is not an executable; install LLVM's tools "
                         f"(Debian/Ubuntu: apt-get install llvm-22, which provides llvm-mc-22)")


class ToolFailed(DecodeError):
    """llvm-mc ran but failed, complained (an unknown -mcpu, say) or printed what this parser does not know."""


@dataclass(frozen=True)
class Reg:
    name: str  # LLVM's register name: VGPR0, SGPR4_SGPR5, VCC_LO, EXEC, VGPR0_..._VGPR15, AGPR3, ...


@dataclass(frozen=True)
class Imm:
    value: int  # an integer immediate: a constant, a literal's bits, a modifier or control field, an offset


@dataclass(frozen=True)
class FPImm:
    value: float  # a floating-point immediate (LLVM's SFPImm / DFPImm)


@dataclass(frozen=True)
class Expr:
    text: str  # a symbolic expression, as LLVM prints it


McOperand = Reg | Imm | FPImm | Expr


@dataclass(frozen=True)
class Instruction:
    address: int
    size: int
    encoding: bytes  # its bytes in the code (literal, DPP or SDWA dword included)
    opcode: str  # the MCInst's opcode name, e.g. V_MFMA_F32_32X32X8BF16_1K_gfx940_vcd
    mnemonic: str  # as printed, e.g. v_add_f32_e32
    operands: str  # the operand text as printed, modifiers included ("" when none)
    mc_operands: tuple[McOperand, ...]

    @property
    def text(self) -> str:
        return f"{self.mnemonic} {self.operands}" if self.operands else self.mnemonic


def disassemble(code: bytes, base_address: int, mcpu: str, llvm_mc: Path, mattr: str = "") -> list[Instruction]:
    """Every instruction of `code` (loaded at `base_address`) for `-mcpu=mcpu`, in address order. `mattr`
    (`-mattr`, e.g. "+real-true16") names target features the code was compiled with that the disassembler
    does not assume for that cpu: they decide how some encodings decode."""
    if not code:
        return []
    stdout, stderr = _run(code, mcpu, mattr, llvm_mc)
    _check_messages(stderr, code, base_address, mcpu)
    return _tile(_parse(stdout, base_address), code, base_address, mcpu, mattr, llvm_mc)


def _run(code: bytes, mcpu: str, mattr: str, llvm_mc: Path) -> tuple[str, str]:
    return _run_text(" ".join(_HEX[b] for b in code) + "\n", mcpu, mattr, llvm_mc)


def _run_text(text: str, mcpu: str, mattr: str, llvm_mc: Path) -> tuple[str, str]:
    command = [str(llvm_mc), "--disassemble", f"-triple={TRIPLE}", f"-mcpu={mcpu}", "-show-inst",
               "-show-encoding", *([f"-mattr={mattr}"] if mattr else [])]
    try:
        proc = subprocess.run(command, input=text, capture_output=True, text=True, env=_ENV, timeout=TIMEOUT_S,
                              check=False)
    except OSError:  # not there, not executable
        raise ToolMissing(llvm_mc) from None
    except subprocess.TimeoutExpired:
        raise ToolFailed(f"{llvm_mc} did not finish within {TIMEOUT_S:g} s") from None
    if proc.returncode < 0:  # llvm-mc 22 crashes, for one, on a literal cut off by the end of its input
        raise ToolFailed(f"{llvm_mc} -mcpu={mcpu} crashed (signal {-proc.returncode}) on this code")
    if proc.returncode != 0:
        raise ToolFailed(f"{llvm_mc} -mcpu={mcpu} exited with {proc.returncode}: {_first_lines(proc.stderr)}")
    return proc.stdout, proc.stderr


# "<stdin>:1:261: warning: invalid instruction encoding" (then the input line and a caret, not parsed)
_MESSAGE = re.compile(r"^<stdin>:\d+:(\d+): (warning|error): ([^\n]*)$", re.M)
_LINE = re.compile(r"^<stdin>:(\d+):\d+: ", re.M)
_UNDECODED = ("invalid instruction encoding", "potentially undefined instruction encoding")


def _check_messages(stderr: str, code: bytes, base_address: int, mcpu: str) -> None:
    """An invalid encoding raises Undecodable at its byte; any other message from the tool is a failure."""
    if not stderr:
        return
    for match in _MESSAGE.finditer(stderr):
        if match.group(3).strip() in _UNDECODED:
            offset = (int(match.group(1)) - 1) // _TOKEN
            raise Undecodable(base_address + offset, code[offset:offset + 8],
                              f"llvm-mc -mcpu={mcpu}: {match.group(3).strip()}")
    raise ToolFailed(f"llvm-mc -mcpu={mcpu} said: {_first_lines(stderr)}")


def _first_lines(text: str, count: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    shown = [line[:200] for line in lines[:count]]
    return " | ".join(shown) + (" ..." if len(lines) > count else "") if shown else "no message"


# One instruction: its asm line, the MCInst header, one line per operand; the MCInst's closing `>` follows
# the last operand's (or its name, when it has none).
_BLOCK = re.compile(
    r"\t(?P<asm>[^\n]*?) *; encoding: \[(?P<enc>[0-9a-fx,]*)\]\n"
    r"[ \t]*; <MCInst #\d+ (?P<opcode>[^\s>]+)(?P<ops>(?:\n[ \t]*;  <MCOperand [^\n]*)*)>(?:\n|\Z)")
_OPERAND = re.compile(r"[ \t]*;  <MCOperand (Reg|Imm|SFPImm|DFPImm|FPImm|Expr):([^\n]*)>")


def _parse(stdout: str, base_address: int) -> list[Instruction]:
    found: list[Instruction] = []
    address, pos = base_address, 0
    match = _BLOCK.match
    while pos < len(stdout):
        block = match(stdout, pos)
        if block is None:
            raise ToolFailed(f"llvm-mc printed what the parser does not know, after {len(found)} instructions: "
                             f"{stdout[pos:pos + 200]!r}")
        pos = block.end()
        encoding = bytes.fromhex(block["enc"].replace("0x", "").replace(",", ""))
        mnemonic, *operands = block["asm"].split(None, 1) or ["?"]  # "?": llvm-mc printed no text
        found.append(Instruction(address, len(encoding), encoding, block["opcode"], mnemonic,
                                 operands[0].strip() if operands else "", _operands(block["ops"])))
        address += len(encoding)
    return found


def _operands(text: str) -> tuple[McOperand, ...]:
    out: list[McOperand] = []
    for line in text.split("\n")[1:]:
        operand = _OPERAND.fullmatch(line)
        if operand is None:
            raise ToolFailed(f"llvm-mc printed an operand the parser does not know: {line.strip()!r}")
        kind, value = operand.groups()
        if kind == "Reg":
            out.append(Reg(value))
        elif kind == "Imm":
            out.append(Imm(int(value)))
        elif kind == "Expr":
            out.append(Expr(value))
        else:
            out.append(FPImm(float(value)))
    return tuple(out)


def _tile(found: list[Instruction], code: bytes, base_address: int, mcpu: str, mattr: str,
          llvm_mc: Path) -> list[Instruction]:
    """`found` with each instruction's own bytes from `code` (see the module's docstring); the sizes must tile
    the blob, and an instruction printed with other bytes than its own must decode alone to itself."""
    offset, tiled, again = 0, [], []
    for inst in found:
        own = code[offset:offset + inst.size]
        if len(own) != inst.size:
            raise Undecodable(inst.address, own, f"llvm-mc -mcpu={mcpu} printed {inst.text}, "
                              f"{inst.size} bytes, past the end of the code")
        if own != inst.encoding:
            inst = replace(inst, encoding=own)
            again.append(inst)
        tiled.append(inst)
        offset += inst.size
    if offset != len(code):
        raise Undecodable(base_address + offset, code[offset:offset + 8],
                          f"llvm-mc -mcpu={mcpu} decoded no instruction from here to the end")
    if again:
        _confirm_alone(again, mcpu, mattr, llvm_mc)
    return tiled


def _confirm_alone(insts: list[Instruction], mcpu: str, mattr: str, llvm_mc: Path) -> None:
    """Each instruction's own bytes, on a line of their own, decode to that instruction and nothing more."""
    text = "\n".join(" ".join(_HEX[b] for b in inst.encoding) for inst in insts) + "\n"
    stdout, stderr = _run_text(text, mcpu, mattr, llvm_mc)
    if stderr:
        line = next((int(m.group(1)) for m in _LINE.finditer(stderr)), 1)
        inst = insts[min(line, len(insts)) - 1]
        raise Undecodable(inst.address, inst.encoding, f"llvm-mc -mcpu={mcpu} decodes {inst.text} here but not "
                          f"from these bytes alone: {_first_lines(stderr)}")
    for inst, back in itertools.zip_longest(insts, _parse(stdout, 0)):
        if inst is None:  # a line gave more than one instruction
            raise Undecodable(insts[-1].address, insts[-1].encoding, f"llvm-mc -mcpu={mcpu}: an instruction's "
                              "own bytes decode to more than one instruction")
        if back is None or (back.opcode, back.text, back.size, back.mc_operands) != \
                (inst.opcode, inst.text, inst.size, inst.mc_operands):
            said = f"{back.text} ({back.size} bytes)" if back else "nothing"
            raise Undecodable(inst.address, inst.encoding, f"llvm-mc -mcpu={mcpu} decodes {inst.text} "
                              f"({inst.size} bytes) here, but these bytes alone as {said}")
