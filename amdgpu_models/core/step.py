"""One instruction on one wave: its operand fields read once, then the scalar, vector or memory semantics;
the pc moves past it unless a taken branch set it."""

from __future__ import annotations

from amdgpu_models.core.instruction import Fields, Instruction
from amdgpu_models.core.memory import Lds, Memory
from amdgpu_models.core.memory_ops import run_memory
from amdgpu_models.core.scalar_ops import run_scalar
from amdgpu_models.core.vector_ops import run_vector
from amdgpu_models.core.wave import Unsupported, Wave


def step(wave: Wave, inst: Instruction, f: Fields, memory: Memory | None = None, lds: Lds | None = None) -> None:
    """`f`: the instruction's fields (`inst.fields`); `inst.kind` says which semantics run it."""
    jumped = False
    try:
        if inst.kind == "scalar":
            jumped = run_scalar(wave, inst, f)
        elif inst.kind == "vector":
            run_vector(wave, inst, f)
        elif memory is None or lds is None:
            raise Unsupported("a memory instruction on a wave without memory")
        else:
            run_memory(wave, inst, f, memory, lds)
    except Unsupported as exc:
        where = f"{inst.name} at {inst.address:#x}"
        raise Unsupported(str(exc) if where in str(exc) else f"{exc} ({where})") from None
    if not jumped:
        wave.pc = inst.address + inst.size


def run_program(wave: Wave, program: list[Instruction], memory: Memory | None = None, lds: Lds | None = None,
                limit: int = 100_000) -> None:
    """Runs a list of instructions from its first until s_endpgm or its end (unit tests' programs)."""
    at = {inst.address: (inst, inst.fields) for inst in program}
    wave.pc = program[0].address
    for _ in range(limit):
        found = at.get(wave.pc)
        if found is None or wave.done:
            return
        step(wave, *found, memory, lds)
    raise Unsupported(f"no s_endpgm after {limit} instructions")
