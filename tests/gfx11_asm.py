"""Small gfx11 programs assembled by LLVM's own assembler (llvm-mc, beside the pinned llvm-objdump), for the
emulator's unit tests: the bytes come from LLVM, never from the model under test."""

from __future__ import annotations

import io
import struct
import subprocess
from functools import cache
from pathlib import Path

import numpy as np
from conftest import REPO
from elftools.elf.elffile import ELFFile

from amdgpu_models.core.instruction import Instruction
from amdgpu_models.core.kernel import Kernel, Program
from amdgpu_models.core.memory import Lds, Memory
from amdgpu_models.core.step import run_program
from amdgpu_models.core.wave import Wave
from amdgpu_models.core.workgroup import Decoder, Launch, Runner
from amdgpu_models.isa import gfx11
from farm.table.config import load as load_config
from farm.toolchain.disasm import binary


@cache
def assembler() -> Path:
    """llvm-mc of the same LLVM install as the pinned disassembler (the `llvm-22` package setup.sh installs)."""
    objdump = binary(load_config(REPO, []).toolchain_pin.get("disassembler"))
    return objdump.with_name(objdump.name.replace("objdump", "mc"))


def assemble(source: str, mcpu: str = "gfx1100", mattr: str = "") -> bytes:
    """The .text bytes of `source` (one instruction per line) assembled for `mcpu` (gfx1100 by default)."""
    command = [str(assembler()), "-arch=amdgcn", f"-mcpu={mcpu}", "-filetype=obj", "-o", "-"]
    proc = subprocess.run(command + ([f"-mattr={mattr}"] if mattr else []), input=source.encode(),
                          capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    return ELFFile(io.BytesIO(proc.stdout)).get_section_by_name(".text").data()


def instructions(source: str) -> list[Instruction]:
    """The model's instructions, as amdgpu_models decodes them through llvm-mc -mcpu=gfx1100."""
    return gfx11.decode(assemble(source), 0, assembler(), "gfx1100")


def decoder(code: bytes, address: int) -> list[Instruction]:
    """The decoder a Runner takes, for gfx1100 code."""
    return gfx11.decode(code, address, assembler(), "gfx1100")


def run(source: str, sgpr: dict[int, int] | None = None, vgpr: dict[int, list[int] | int] | None = None,
        exec_mask: int = 0xFFFFFFFF, scc: bool = False) -> Wave:
    """`source` assembled and run on a fresh wave with the given registers (a VGPR: one value per lane or one
    for all lanes)."""
    return run_decoded(instructions(source + "\ns_endpgm"), sgpr, vgpr, exec_mask, scc)


def run_decoded(program: list[Instruction], sgpr: dict[int, int] | None = None,
                vgpr: dict[int, list[int] | int] | None = None, exec_mask: int = 0xFFFFFFFF, scc: bool = False,
                memory: Memory | None = None) -> Wave:
    """Decoded instructions (of any ISA) run on a fresh wave32 with the given registers."""
    wave = Wave()
    wave.sgpr[126] = exec_mask
    wave.scc = scc
    for reg, value in (sgpr or {}).items():
        wave.sgpr[reg] = value & 0xFFFFFFFF
    for reg, values in (vgpr or {}).items():
        wave.vgpr[reg] = np.array(values, dtype=np.uint64).astype(np.uint32) if isinstance(values, list) \
            else values & 0xFFFFFFFF
    run_program(wave, program, memory or Memory(), Lds.of_size(0))
    return wave


def launch_with_output(program: Program, kernel: Kernel, decode: Decoder, grid: tuple[int, int, int],
                       block: tuple[int, int, int], out_bytes: int) -> tuple[Memory, int]:
    """Run a hand-made kernel whose only argument is a pointer to a zeroed `out_bytes` buffer: (the memory, the
    buffer's address)."""
    memory = Memory()
    out = memory.allocate("out", bytes(out_bytes))
    kernarg = memory.allocate("kernarg", struct.pack("<Q", out))
    Runner(program, kernel, decode).run(Launch(kernel, grid, block, kernarg), memory)
    return memory, out
