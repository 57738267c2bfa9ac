"""Wave matrix multiply-accumulate (WMMA): D = A x B + C for 16x16 matrices over K = 16, on a wave32.

What is shared between generations is the multiply (`multiply`); where each matrix element lives in the VGPRs
is a small per-ISA `Layout`. A layout names, for every (VGPR of the operand, lane, 16-bit half) of the A and
B operands, the element it holds, and for every (VGPR, lane) of the f32 accumulator its (row, column). A new
generation adds a Layout and its opcodes to `WMMA`, and touches nothing else here.

RDNA3 (gfx11, `RDNA3`), from AMD's RDNA3 ISA guide ("Wave Matrix Multiply Accumulate") and LLVM's AMDGPU
usage notes: A and B take 8 VGPRs of two 16-bit values each; lane l holds row l % 16 of A (column l % 16 of
B), VGPR r's low half K index 2r and its high half 2r + 1, and lanes 16-31 must repeat lanes 0-15 (the guide
requires it; the model stops when the copies differ, as what the hardware does then is not documented).
The f32 accumulator C and result D take 8 VGPRs: lane l, VGPR v holds row 2v + l / 16, column l % 16.
RDNA4 (gfx12, `RDNA4`), from the same sources: A and B take 4 VGPRs (8 halves per lane); lane l holds row
l % 16 of A (column l % 16 of B) for K indices 8 * (l / 16) .. + 7, VGPR r's low half K 8 * (l / 16) + 2r and
its high half the next; every element is held once. The f32 accumulator: lane l, VGPR v holds row
v + 8 * (l / 16), column l % 16. gfx12 prints the same mnemonics as gfx11: the core names its WMMA
`..._gfx12`, and isa/gfx12.py aliases its mnemonics to them.
kernels_src/sdpa_rdna/SOURCE.md describes how the attention kernel relies on these layouts.
C may also be an inline constant (LLVM's `v_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], 0`): every element
of C is then that constant's binary32 value.

Arithmetic (an assumption, not the hardware's documented behaviour): each product of two f16 or bf16 values
is exact in binary64 (11 + 11 or 8 + 8 significant bits), the 16 products are added to C in binary64 in
K order (C first), and the sum is rounded once to binary32, to nearest even. The hardware's internal
summation is not documented to be bit-exact against a correctly rounded dot product (nor against this
order), so a model result may differ from the hardware's in the last bits of a result whose terms cancel;
the farm's tolerances allow for that. A NaN result is the canonical quiet NaN 0x7FC00000. Inputs are
neither flushed nor clamped (the kernels' float mode keeps denormals). EXEC must be all ones, and the
VOP3P modifiers (neg, op_sel, clamp) must be off: anything else stops the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from amdgpu_models.core.instruction import Fields, Instruction
from amdgpu_models.core.wave import VGPR_BASE, Unsupported, Wave

N = 16  # M = N = K = 16
CANONICAL_NAN = np.uint32(0x7FC00000)


@dataclass(frozen=True)
class Layout:
    """Where one generation's wave32 WMMA keeps its matrices. `operand(reg, lane, half)` gives the element
    held there as (row of A or column of B, K index); `accumulator(reg, lane)` the (row, column) of C and D.
    Both take numpy index arrays."""

    name: str
    operand_registers: int  # VGPRs of A and of B (two 16-bit values each)
    operand: Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
    accumulator: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
    accumulator_registers: int = 8
    lanes: int = 32

    @cached_property
    def operand_index(self) -> tuple[np.ndarray, np.ndarray]:
        """(outer, k) per (reg, lane, half), each index checked to be inside the matrix and every element held
        somewhere."""
        reg, lane, half = np.meshgrid(np.arange(self.operand_registers), np.arange(self.lanes), np.arange(2),
                                      indexing="ij")
        outer, k = (np.asarray(x, dtype=np.int64) for x in self.operand(reg, lane, half))
        _check_cover(self.name, "operand", outer, k)
        return outer, k

    @cached_property
    def accumulator_index(self) -> tuple[np.ndarray, np.ndarray]:
        reg, lane = np.meshgrid(np.arange(self.accumulator_registers), np.arange(self.lanes), indexing="ij")
        row, column = (np.asarray(x, dtype=np.int64) for x in self.accumulator(reg, lane))
        _check_cover(self.name, "accumulator", row, column)
        if row.size != N * N:
            raise ValueError(f"{self.name}: the accumulator holds each element once ({row.size} places)")
        return row, column


def _check_cover(name: str, what: str, i: np.ndarray, j: np.ndarray) -> None:
    if i.min() < 0 or i.max() >= N or j.min() < 0 or j.max() >= N:
        raise ValueError(f"{name}: an {what} index outside 16x16")
    held = np.zeros((N, N), dtype=bool)
    held[i, j] = True
    if not held.all():
        raise ValueError(f"{name}: the {what} layout leaves elements out")


RDNA3 = Layout(
    "RDNA3 wave32",
    operand_registers=8,
    operand=lambda reg, lane, half: (lane % 16, 2 * reg + half),
    accumulator=lambda reg, lane: (2 * reg + lane // 16, lane % 16),
)


RDNA4 = Layout(
    "RDNA4 wave32",
    operand_registers=4,
    operand=lambda reg, lane, half: (lane % 16, 8 * (lane // 16) + 2 * reg + half),
    accumulator=lambda reg, lane: (reg + 8 * (lane // 16), lane % 16),
)


def f16_values(halves: np.ndarray) -> np.ndarray:
    """16-bit patterns as binary16, widened exactly to binary64."""
    return halves.astype(np.uint16).view(np.float16).astype(np.float64)


def bf16_values(halves: np.ndarray) -> np.ndarray:
    """16-bit patterns as bfloat16 (the top half of a binary32), widened exactly to binary64."""
    return (halves.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


@dataclass(frozen=True)
class Wmma:
    """One WMMA opcode: its input element type and its generation's layout (f32 accumulator)."""

    values: Callable[[np.ndarray], np.ndarray]
    layout: Layout


# The core's WMMA operations, by name. An ISA table maps its LLVM mnemonic to one of these (an alias when two
# generations share a mnemonic but not a layout).
WMMA: dict[str, Wmma] = {
    "v_wmma_f32_16x16x16_f16": Wmma(f16_values, RDNA3),
    "v_wmma_f32_16x16x16_bf16": Wmma(bf16_values, RDNA3),
    "v_wmma_f32_16x16x16_f16_gfx12": Wmma(f16_values, RDNA4),
    "v_wmma_f32_16x16x16_bf16_gfx12": Wmma(bf16_values, RDNA4),
}


def multiply(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """A (16x16, [m][k]) x B ([k][n]) + C ([m][n]), all binary64: products exact for 16-bit inputs, summed
    in binary64 from C in K order, rounded once to binary32 (returned as bits; NaN canonical)."""
    with np.errstate(all="ignore"):
        total = c.copy()
        for k in range(N):
            total += a[:, k, None] * b[None, k, :]
        result = total.astype(np.float32).view(np.uint32)
    return np.where(np.isnan(total), CANONICAL_NAN, result).astype(np.uint32)


def gather_operand(regs: np.ndarray, layout: Layout) -> np.ndarray:
    """The 16x16 matrix of 16-bit patterns an operand's VGPRs hold, [outer][k] (A: [m][k]; B: [n][k]).
    Raises ValueError when two places that hold the same element disagree."""
    halves = np.stack([regs & np.uint32(0xFFFF), regs >> np.uint32(16)], axis=-1)  # [reg][lane][half]
    outer, k = layout.operand_index
    matrix = np.zeros((N, N), dtype=np.uint32)
    matrix[outer, k] = halves
    if not np.array_equal(matrix[outer, k], halves):
        differ = np.argwhere(matrix[outer, k] != halves)[0]
        raise ValueError(f"VGPR +{differ[0]} lane {differ[1]} holds element ({outer[tuple(differ)]}, "
                         f"{k[tuple(differ)]}) differently from another lane that holds it")
    return matrix


def gather_accumulator(regs: np.ndarray, layout: Layout) -> np.ndarray:
    row, column = layout.accumulator_index
    matrix = np.zeros((N, N), dtype=np.uint32)
    matrix[row, column] = regs
    return matrix


def scatter_accumulator(matrix: np.ndarray, layout: Layout) -> np.ndarray:
    row, column = layout.accumulator_index
    return matrix[row, column].astype(np.uint32)


def run_wmma(wave: Wave, inst: Instruction, f: Fields) -> None:
    op = WMMA[inst.name]
    layout = op.layout
    where = f"{inst.name} at {inst.address:#x}"
    if wave.lanes != layout.lanes:
        raise Unsupported(f"{where} on a wave of {wave.lanes} lanes ({layout.name} is wave{layout.lanes})")
    if f.neg or f.neg_hi or f.opsel or f.opsel_hi or f.clamp:
        raise Unsupported(f"{where} with neg, op_sel or clamp modifiers")
    if not wave.exec_mask.all():
        raise Unsupported(f"{where} with EXEC {wave.read_mask(126):#x} (WMMA needs every lane on)")
    blocks = []
    for i, count in enumerate((layout.operand_registers, layout.operand_registers, layout.accumulator_registers)):
        code = f.src[i]
        if i == 2 and code < VGPR_BASE:  # C an inline constant: every element that value
            blocks.append(np.full((count, wave.lanes), wave.scalar(code, f.lit(i)), dtype=np.uint32))
            continue
        if code < VGPR_BASE:
            raise Unsupported(f"{where}: source {i} is not a VGPR")
        first = code - VGPR_BASE
        if first + count > len(wave.vgpr):
            raise Unsupported(f"{where}: v{first}..v{first + count - 1} is beyond the kernel's VGPRs")
        blocks.append(wave.vgpr[first:first + count])
    try:
        a = op.values(gather_operand(blocks[0], layout))  # [m][k]
        b = op.values(gather_operand(blocks[1], layout)).T  # [n][k] -> [k][n]
    except ValueError as exc:
        raise Unsupported(f"{where}: {exc}") from None
    c = gather_accumulator(blocks[2], layout).view(np.float32).astype(np.float64)
    d = scatter_accumulator(multiply(a, b, c), layout)
    if f.dst + layout.accumulator_registers > len(wave.vgpr):
        raise Unsupported(f"{where}: the result is beyond the kernel's VGPRs")
    wave.vgpr[f.dst:f.dst + layout.accumulator_registers] = d
