"""Instruction-level models of AMD GPU ISAs (gfx11-generic, gfx12-generic, gfx90a, gfx942, gfx950).

Knows nothing of the farm that builds the objects it runs: it takes bytes, an `-mcpu` name and the path of
LLVM's own tools. Decoding is grounded in LLVM, never in hand-read opcode tables: `amdgpu_models.disasm`
runs `llvm-mc --disassemble -show-inst -show-encoding` once per code blob and turns what it prints (the
asm text, the encoding bytes, the MCInst's opcode name and typed operands) into `Instruction` records.
"""
