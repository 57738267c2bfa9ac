"""Matrix multiply-accumulate on a wave: RDNA's WMMA (wave32) and CDNA's MFMA (wave64), D = A x B + C.

What is shared between generations and forms is the multiply (`multiply`: one rounding of an exact-product
sum); where each matrix element lives in the registers is a small per-form `Layout`. A layout names, for every
(register of the operand, lane, 16-bit half) of the A and B operands, the element it holds, and for every
(register, lane) of the f32 accumulator its (row, column). A new form adds a Layout and its opcodes to `WMMA`
or `MFMA`, and touches nothing else here.

WMMA (16x16x16, wave32).
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

MFMA (wave64), the forms the farm's CDNA objects use. Measured over every object in outputs/ with
`llvm-objdump-22 -d --mcpu=<target>` (sdpa_cdna, sdpa_cdna_decode, sdpa_cdna_dualwave; rmsnorm and
rmsnorm_bwd use no MFMA and no AGPR):
  gfx90a: v_mfma_f32_16x16x16f16, v_mfma_f32_16x16x16bf16_1k, v_mfma_f32_32x32x8f16, v_mfma_f32_32x32x8bf16_1k;
  gfx942: v_mfma_f32_16x16x16_f16, v_mfma_f32_16x16x16_bf16, v_mfma_f32_32x32x8_f16, v_mfma_f32_32x32x8_bf16
          (LLVM's gfx940+ spellings of the same four operations: its opcode records are the same,
          V_MFMA_F32_16X16X16F16 ... V_MFMA_F32_32X32X8BF16_1K);
  gfx950: v_mfma_f32_16x16x16_f16, v_mfma_f32_16x16x16_bf16 (sdpa_cdna_decode), and the CDNA4 double-K forms
          v_mfma_f32_16x16x32_f16, v_mfma_f32_16x16x32_bf16, v_mfma_f32_32x32x16_f16, v_mfma_f32_32x32x16_bf16;
  all: v_accvgpr_read_b32 vN, aN and v_accvgpr_write_b32 aN, vN (sdpa_cdna only; no v_accvgpr_mov_b32).
No object sets cbsz, abid or blgp (all 0), none uses neg, no multi-block form (4x4, _2b/_4b/_16b), no xf32,
f64, integer, fp8 or sparse (smfmac) form. D is always VGPRs (acc_cd off); C is VGPRs or the inline constant
0; A and B are VGPRs or AGPRs. AGPRs are also the data of buffer_load_dwordx2 (gfx90a, gfx942),
buffer_load_dwordx4, ds_read2_b64, ds_read_b128 and ds_write_b128 (gfx950) in sdpa_cdna.
The core names an MFMA by its gfx940+ spelling (`MFMA`); `GFX90A_SPELLINGS` maps gfx90a's, `CDNA3` and
`CDNA4_ONLY` say which target has which, for the ISA tables in amdgpu_models/isa/.

Where the elements live (one block, every element held once), from AMD's CDNA3 and CDNA4 ISA guides ("Matrix
Arithmetic Instructions", the dependent-register layouts) as AMD's Matrix Instruction Calculator prints them,
and the operand types of LLVM's AMDGPU backend (A and B of the f16/bf16 K-reduction forms are 4 or 8 halves per
lane, C/D 4 or 16 f32 per lane). For an M x N x K form with M = N and a lane group of M lanes:
- A (M x K): lane l holds row l % M, K indices h * (l / M) .. + h - 1 where h is the halves per lane (4: two
  VGPRs; 8 in the CDNA4 double-K forms: four VGPRs); register r's low half is K h * (l / M) + 2r, its high
  half the next. B (K x N) the same with column l % N in place of the row.
- C and D, 16x16 (4 registers): lane l, register v holds row 4 * (l / 16) + v, column l % 16.
- C and D, 32x32 (16 registers): lane l, register v holds row 8 * (v / 4) + 4 * (l / 32) + v % 4, column l % 32.
The same layouts hold on gfx90a, gfx942 and gfx950 for the operations they share (`CDNA_16X16X16`,
`CDNA_32X32X8`); gfx950 adds `CDNA4_16X16X32`, `CDNA4_32X32X16`.
Which K index a half holds is invisible to one multiply (a permutation of K shared by A and B changes only
the order of the sum), and the farm's objects do not see it either (with the double-K forms' K split into two
runs of 4 per lane the gfx950 attention objects give the same errors): that part rests on the guides and
agrees with composable_kernel's MFMA table (k_per_blk 4, or 8 for the double-K forms, consecutive K per lane).
Registers: A, B and C may each be VGPRs or AGPRs (operand codes 256-511 and 512-767, see core/wave.py), D
VGPRs or AGPRs (a register number, AGPR n being 256 + n); C may be an inline constant. cbsz, abid and blgp
(the broadcast controls) must be 0, and EXEC all ones: anything else stops the run (not modelled).

Arithmetic, WMMA and MFMA alike (an assumption, not the hardware's documented behaviour): each product of
two f16 or bf16 values is exact in binary64 (11 + 11 or 8 + 8 significant bits), the K products are added
to C in binary64 in K order (C first), and the sum is rounded once to binary32, to nearest even. The
hardware's internal summation is not documented to be bit-exact against a correctly rounded dot product (nor
against this order), so a model result may differ from the hardware's in the last bits of a result whose
terms cancel; the farm's tolerances allow for that. A NaN result is the canonical quiet NaN
0x7FC00000. Denormals: inputs (f16, bf16 and the f32 C) are neither flushed nor clamped, and a denormal
binary32 result is kept, whatever the kernel's float mode says (the model does not apply MODE's denormal
flags to matrix operations; the farm's kernels keep denormals anyway). WMMA: EXEC must be all ones, and the
VOP3P modifiers (neg, op_sel, clamp) must be off: anything else stops the run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from amdgpu_models.core.instruction import Fields, Instruction
from amdgpu_models.core.wave import AGPR_BASE, VGPR_BASE, Unsupported, Wave

N = 16  # WMMA: M = N = K = 16
CANONICAL_NAN = np.uint32(0x7FC00000)


@dataclass(frozen=True)
class Layout:
    """Where one form keeps its matrices (M = N = `size`, K = `depth`). `operand(reg, lane, half)` gives the
    element held there as (row of A or column of B, K index); `accumulator(reg, lane)` the (row, column) of C
    and D. Both take numpy index arrays."""

    name: str
    operand_registers: int  # VGPRs of A and of B (two 16-bit values each)
    operand: Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
    accumulator: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
    accumulator_registers: int = 8
    lanes: int = 32
    size: int = N  # M and N
    depth: int = N  # K

    @cached_property
    def operand_index(self) -> tuple[np.ndarray, np.ndarray]:
        """(outer, k) per (reg, lane, half), each index checked to be inside the matrix and every element held
        somewhere."""
        reg, lane, half = np.meshgrid(np.arange(self.operand_registers), np.arange(self.lanes), np.arange(2),
                                      indexing="ij")
        outer, k = (np.asarray(x, dtype=np.int64) for x in self.operand(reg, lane, half))
        _check_cover(self.name, "operand", outer, k, (self.size, self.depth))
        return outer, k

    @cached_property
    def operand_holder(self) -> tuple[np.ndarray, bool]:
        """Per element of the operand's matrix, the place (flat index of [reg][lane][half]) whose value it takes,
        the last of its holders as an assignment through `operand_index` keeps; and whether any element is held
        more than once (RDNA3's lanes 16-31 repeat lanes 0-15)."""
        outer, k = self.operand_index
        holder = np.zeros((self.size, self.depth), dtype=np.int64)
        holder[outer, k] = np.arange(outer.size).reshape(outer.shape)
        return holder, outer.size != holder.size

    @cached_property
    def accumulator_index(self) -> tuple[np.ndarray, np.ndarray]:
        reg, lane = np.meshgrid(np.arange(self.accumulator_registers), np.arange(self.lanes), indexing="ij")
        row, column = (np.asarray(x, dtype=np.int64) for x in self.accumulator(reg, lane))
        _check_cover(self.name, "accumulator", row, column, (self.size, self.size))
        if row.size != self.size * self.size:
            raise ValueError(f"{self.name}: the accumulator holds each element once ({row.size} places)")
        return row, column


def _check_cover(name: str, what: str, i: np.ndarray, j: np.ndarray, shape: tuple[int, int]) -> None:
    if i.min() < 0 or i.max() >= shape[0] or j.min() < 0 or j.max() >= shape[1]:
        raise ValueError(f"{name}: an {what} index outside {shape[0]}x{shape[1]}")
    held = np.zeros(shape, dtype=bool)
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


# CDNA MFMA, wave64, one block: `halves` 16-bit values of A (B) per lane, K = halves * 64 / size.
def _mfma_layout(name: str, size: int, halves: int) -> Layout:
    groups = 64 // size  # lane groups: each holds its own K range
    if size == 16:
        accumulator = lambda reg, lane: (4 * (lane // 16) + reg, lane % 16)  # noqa: E731
    else:
        accumulator = lambda reg, lane: (8 * (reg // 4) + 4 * (lane // 32) + reg % 4, lane % 32)  # noqa: E731
    return Layout(name, operand_registers=halves // 2,
                  operand=lambda reg, lane, half: (lane % size, halves * (lane // size) + 2 * reg + half),
                  accumulator=accumulator, accumulator_registers=size * size // 64, lanes=64, size=size,
                  depth=halves * groups)


CDNA_16X16X16 = _mfma_layout("CDNA 16x16x16 wave64", 16, 4)
CDNA_32X32X8 = _mfma_layout("CDNA 32x32x8 wave64", 32, 4)
CDNA4_16X16X32 = _mfma_layout("CDNA4 16x16x32 wave64", 16, 8)
CDNA4_32X32X16 = _mfma_layout("CDNA4 32x32x16 wave64", 32, 8)


def f16_values(halves: np.ndarray) -> np.ndarray:
    """16-bit patterns as binary16, widened exactly to binary64."""
    return halves.astype(np.uint16).view(np.float16).astype(np.float64)


def bf16_values(halves: np.ndarray) -> np.ndarray:
    """16-bit patterns as bfloat16 (the top half of a binary32), widened exactly to binary64."""
    return (halves.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


@dataclass(frozen=True)
class MatrixOp:
    """One WMMA or MFMA opcode: its input element type and its form's layout (f32 accumulator)."""

    values: Callable[[np.ndarray], np.ndarray]
    layout: Layout


# The core's WMMA operations, by name. An ISA table maps its LLVM mnemonic to one of these (an alias when two
# generations share a mnemonic but not a layout).
WMMA: dict[str, MatrixOp] = {
    "v_wmma_f32_16x16x16_f16": MatrixOp(f16_values, RDNA3),
    "v_wmma_f32_16x16x16_bf16": MatrixOp(bf16_values, RDNA3),
    "v_wmma_f32_16x16x16_f16_gfx12": MatrixOp(f16_values, RDNA4),
    "v_wmma_f32_16x16x16_bf16_gfx12": MatrixOp(bf16_values, RDNA4),
}


# MFMA: the core's name (LLVM's gfx940+ spelling) -> input type and layout (f32 accumulator, one block).
MFMA: dict[str, MatrixOp] = {
    "v_mfma_f32_16x16x16_f16": MatrixOp(f16_values, CDNA_16X16X16),
    "v_mfma_f32_16x16x16_bf16": MatrixOp(bf16_values, CDNA_16X16X16),
    "v_mfma_f32_32x32x8_f16": MatrixOp(f16_values, CDNA_32X32X8),
    "v_mfma_f32_32x32x8_bf16": MatrixOp(bf16_values, CDNA_32X32X8),
    "v_mfma_f32_16x16x32_f16": MatrixOp(f16_values, CDNA4_16X16X32),
    "v_mfma_f32_16x16x32_bf16": MatrixOp(bf16_values, CDNA4_16X16X32),
    "v_mfma_f32_32x32x16_f16": MatrixOp(f16_values, CDNA4_32X32X16),
    "v_mfma_f32_32x32x16_bf16": MatrixOp(bf16_values, CDNA4_32X32X16),
}
CDNA4_ONLY = frozenset(name for name, op in MFMA.items() if op.layout.name.startswith("CDNA4"))
CDNA3 = frozenset(MFMA) - CDNA4_ONLY  # gfx942's (gfx950 has both sets)
GFX90A_SPELLINGS = {"v_mfma_f32_16x16x16f16": "v_mfma_f32_16x16x16_f16",
                    "v_mfma_f32_16x16x16bf16_1k": "v_mfma_f32_16x16x16_bf16",
                    "v_mfma_f32_32x32x8f16": "v_mfma_f32_32x32x8_f16",
                    "v_mfma_f32_32x32x8bf16_1k": "v_mfma_f32_32x32x8_bf16"}
# Moves between the VGPRs and the AGPRs (gfx90a, gfx942, gfx950): the destination, then the source.
ACCVGPR = frozenset({"v_accvgpr_read_b32", "v_accvgpr_write_b32", "v_accvgpr_mov_b32"})
MNEMONICS = frozenset({*WMMA, *MFMA, *ACCVGPR})  # what vector_ops hands to this module


def multiply(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """A ([m][k]) x B ([k][n]) + C ([m][n]), all binary64: products exact for 16-bit inputs, summed in
    binary64 from C in K order, rounded once to binary32 (returned as bits; NaN canonical)."""
    with np.errstate(all="ignore"):
        terms = np.empty((a.shape[1] + 1, *c.shape))  # C, then the K products [k][m][n] in one multiply
        terms[0] = c
        np.multiply(a.T[:, :, None], b[:, None, :], out=terms[1:])
        total = terms[0]
        for k in range(1, len(terms)):  # one addition at a time, in K order: the same sums as ever
            total += terms[k]
        result = total.astype(np.float32).view(np.uint32)
    return np.where(np.isnan(total), CANONICAL_NAN, result).astype(np.uint32)


def gather_operand(regs: np.ndarray, layout: Layout) -> np.ndarray:
    """The matrix of 16-bit patterns an operand's VGPRs hold, [outer][k] (A: [m][k]; B: [n][k]).
    Raises ValueError when two places that hold the same element disagree."""
    halves = np.ascontiguousarray(regs, dtype="<u4").view("<u2").reshape(*regs.shape, 2)  # [reg][lane][half]
    holder, repeats = layout.operand_holder
    matrix = halves.reshape(-1)[holder].astype(np.uint32)
    if not repeats:  # every element held once: nothing can disagree
        return matrix
    outer, k = layout.operand_index
    if not np.array_equal(matrix[outer, k], halves):
        differ = np.argwhere(matrix[outer, k] != halves)[0]
        raise ValueError(f"VGPR +{differ[0]} lane {differ[1]} holds element ({outer[tuple(differ)]}, "
                         f"{k[tuple(differ)]}) differently from another lane that holds it")
    return matrix


def gather_accumulator(regs: np.ndarray, layout: Layout) -> np.ndarray:
    row, column = layout.accumulator_index
    matrix = np.zeros((layout.size, layout.size), dtype=np.uint32)
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


def _block(wave: Wave, code: int, count: int, where: str, what: str) -> np.ndarray:
    """`count` registers from operand code `code` (VGPRs or AGPRs) as a [reg][lane] view."""
    if code >= AGPR_BASE:
        file, first, kind = wave.agpr, code - AGPR_BASE, "a"
    elif code >= VGPR_BASE:
        file, first, kind = wave.vgpr, code - VGPR_BASE, "v"
    else:
        raise Unsupported(f"{where}: {what} is not a VGPR or AGPR")
    if first + count > len(file):
        raise Unsupported(f"{where}: {kind}{first}..{kind}{first + count - 1} ({what}) is beyond the kernel's "
                          f"{len(file)} {'AGPRs' if kind == 'a' else 'VGPRs'}")
    return file[first:first + count]


def run_mfma(wave: Wave, inst: Instruction, f: Fields) -> None:
    """One block of an f16/bf16 MFMA (see the module's notes): sources read whole, then D written."""
    op = MFMA[inst.name]
    layout = op.layout
    where = f"{inst.name} at {inst.address:#x}"
    if wave.lanes != layout.lanes:
        raise Unsupported(f"{where} on a wave of {wave.lanes} lanes ({layout.name} is wave{layout.lanes})")
    if any(f.mfma):
        raise Unsupported(f"{where} with cbsz/abid/blgp {f.mfma} (broadcasts are not modelled)")
    if f.neg or f.neg_hi or f.opsel or f.opsel_hi or f.clamp:
        raise Unsupported(f"{where} with neg, op_sel or clamp modifiers")
    if not wave.exec_mask.all():
        raise Unsupported(f"{where} with EXEC {wave.read_mask(126):#x} (the model runs MFMA on every lane only)")
    a_regs = _block(wave, f.src[0], layout.operand_registers, where, "A")
    b_regs = _block(wave, f.src[1], layout.operand_registers, where, "B")
    count = layout.accumulator_registers
    if f.src[2] < VGPR_BASE:  # C an inline constant: every element that value
        c_regs = np.full((count, wave.lanes), wave.scalar(f.src[2], f.lit(2)), dtype=np.uint32)
    else:
        c_regs = _block(wave, f.src[2], count, where, "C")
    a = op.values(gather_operand(a_regs, layout))  # [m][k]
    b = op.values(gather_operand(b_regs, layout)).T  # [n][k] -> [k][n]
    c = gather_accumulator(c_regs, layout).view(np.float32).astype(np.float64)
    d = scatter_accumulator(multiply(a, b, c), layout)
    _block(wave, f.dst + VGPR_BASE, count, where, "D")[:] = d  # a register number: AGPR n is 256 + n


def run_accvgpr(wave: Wave, inst: Instruction, f: Fields) -> None:
    """v_accvgpr_read_b32 (AGPR to VGPR), _write_b32 (VGPR or constant to AGPR), _mov_b32 (AGPR to AGPR): a
    32-bit copy on the lanes EXEC enables, like any VALU write."""
    wave.write_vgpr(f.dst, wave.vector(f.src[0], f.lit(0)), wave.exec_mask)
