"""One instruction on one wave: its operand fields read once, then the scalar or vector semantics; the pc
moves past it unless a taken branch set it."""

from __future__ import annotations

from functools import lru_cache

from farm.emulate.decode import Instruction
from farm.emulate.fields import Fields, fields
from farm.emulate.scalar_ops import run_scalar
from farm.emulate.vector_ops import run_vector
from farm.emulate.wave import Unsupported, Wave

SCALAR_ENCODINGS = {"SOP1", "SOP2", "SOPC", "SOPK", "SOPP"}
VECTOR_ENCODINGS = {"VOP1", "VOP2", "VOPC", "VOP3", "VOP3P", "VOPD"}


@lru_cache(maxsize=4096)
def _fields(inst: Instruction) -> Fields:
    return fields(inst)


def step(wave: Wave, inst: Instruction) -> None:
    f = _fields(inst)
    jumped = False
    if inst.encoding in SCALAR_ENCODINGS:
        jumped = run_scalar(wave, inst, f)
    elif inst.encoding in VECTOR_ENCODINGS:
        run_vector(wave, inst, f)
    else:
        raise Unsupported(f"{inst.name} at {inst.address:#x}: memory instructions are not modelled yet")
    if not jumped:
        wave.pc = inst.address + inst.size


def run_program(wave: Wave, program: list[Instruction], limit: int = 100_000) -> None:
    """Runs a straight or branching list of instructions from its first until s_endpgm or its end."""
    at = {inst.address: inst for inst in program}
    wave.pc = program[0].address
    for _ in range(limit):
        inst = at.get(wave.pc)
        if inst is None or wave.done:
            return
        step(wave, inst)
    raise Unsupported(f"no s_endpgm after {limit} instructions")
