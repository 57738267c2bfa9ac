"""One wave's architectural state, wave32 or wave64 (the lane count is the wave's own: RDNA runs wave32,
CDNA wave64), and how instructions read and write it: scalar registers (with VCC, M0, EXEC at their operand
codes; a wave64's EXEC and VCC are the register pairs), VGPRs as one uint32 per lane, SCC, and the program
counter; operand codes resolved to values (registers, inline constants, the literal); DPP16 lane selection.

AGPRs (CDNA's accumulation registers, a0-a255): gfx90a, gfx942 and gfx950 have one unified vector register
file per lane, the kernel's VGPRs first and its AGPRs from the descriptor's ACCUM_OFFSET on (LLVM's AMDGPU
usage notes, "compute_pgm_rsrc3 GFX90A, GFX942": ACCUM_OFFSET; the total is the descriptor's VGPR count, in
granules of 8; at most 256 of each kind). The model keeps that file as `registers`, with `vgpr` and `agpr` its
two views (`Wave(vgprs=accum_offset, agprs=total - accum_offset)`); gfx908's separate AGPR file is no target
here. An instruction names AGPR n as operand code AGPR_BASE + n (512-767, beside VGPRs' 256-511) and, as a
destination or memory data register number, AGPR_REGISTER + n (256-511, beside VGPRs' 0-255). Which
instructions take AGPRs is LLVM's decoder's business (MFMA's A, B, C, D; v_accvgpr_*; memory data).

Every lane-wise value is a numpy uint32 array of one element per lane, so one instruction is one numpy
operation per step, never a Python loop over lanes.
"""

from __future__ import annotations

import numpy as np

from amdgpu_models.core.floats import U32

LANES = 32  # the default width (RDNA's wave32)
WAVE_WIDTHS = (32, 64)
VGPR_BASE = 256  # a 9-bit source operand at or above this names VGPR (code - 256)
AGPR_BASE = 512  # the model's operand code for AGPR (code - 512)
AGPR_REGISTER = 256  # a destination or data register number at or above this names AGPR (number - 256)
NULL = 124  # the scalar operand that reads 0 and drops writes
VCC_LO = 106
EXEC_LO = 126  # and EXEC_HI at 127, VCC_HI at 107: a wave64's masks are register pairs
SCC = 253
TTMP_FIRST, TTMP_LAST = 108, 123
LITERAL = 255
SCALAR_CODES = 128  # s0-s105, VCC, ..., NULL, M0, EXEC live at their own operand codes in one array

# Inline constants, by operand code: integers 0..64 and -1..-16, then floats (binary32 and binary16 bits).
_INTS = {128 + i: i for i in range(65)} | {192 + i: -i for i in range(1, 17)}
_F32 = {240: 0x3F000000, 241: 0xBF000000, 242: 0x3F800000, 243: 0xBF800000, 244: 0x40000000,
        245: 0xC0000000, 246: 0x40800000, 247: 0xC0800000, 248: 0x3E22F983}
_F16 = {240: 0x3800, 241: 0xB800, 242: 0x3C00, 243: 0xBC00, 244: 0x4000, 245: 0xC000, 246: 0x4400,
        247: 0xC400, 248: 0x3118}


MASK_CACHE_SIZE = 4096
_MASKS: dict[tuple[int, int], np.ndarray] = {}
_ALL = {width: np.ones(width, dtype=bool) for width in WAVE_WIDTHS}
for _mask in _ALL.values():
    _mask.flags.writeable = False
ALL_LANES = _ALL[LANES]
_BROADCAST: dict[tuple[int, int], np.ndarray] = {}


def all_lanes(width: int) -> np.ndarray:
    """Every lane on (read-only, one object per width: callers test `is` against it)."""
    return _ALL[width]


class Unsupported(RuntimeError):
    """Something the model does not implement, named with the instruction's address: the run stops."""


class Wave:
    def __init__(self, vgprs: int = 256, lanes: int = LANES, agprs: int = 0) -> None:
        if lanes not in WAVE_WIDTHS:
            raise Unsupported(f"a wave of {lanes} lanes (wave32 or wave64)")
        if not 0 <= agprs <= 256:
            raise Unsupported(f"{agprs} AGPRs (at most 256)")
        self.lanes = lanes
        self.all_lanes = _ALL[lanes]
        self.sgpr = np.zeros(SCALAR_CODES, dtype=np.uint32)
        self.registers = np.zeros((vgprs + agprs, lanes), dtype=np.uint32)  # the unified file: VGPRs, AGPRs
        self.vgpr = self.registers[:vgprs]
        self.agpr = self.registers[vgprs:]
        self.scc = False
        self.pc = 0
        self.done = False
        self.at_barrier = False
        self.barrier_signalled = False  # RDNA4: s_barrier_signal ran, its s_barrier_wait not yet
        self.trap_registers: frozenset[int] = frozenset()  # trap registers the launch filled (operand codes)

    # -- masks -------------------------------------------------------------------------------------------

    @property
    def exec_mask(self) -> np.ndarray:
        """EXEC as one boolean per lane (read-only: shared between calls while EXEC does not change)."""
        value = int(self.sgpr[EXEC_LO])
        if self.lanes == 64:
            value |= int(self.sgpr[EXEC_LO + 1]) << 32
        return self.mask_of(value, self.lanes)

    def lane_mask(self, value: int) -> np.ndarray:
        return self.mask_of(value, self.lanes)

    def read_mask(self, code: int) -> int:
        """A lane mask from a scalar operand: one register in wave32, the register pair in wave64."""
        return self.scalar(code, None) if self.lanes == 32 else self.scalar64(code, None)

    def write_mask(self, code: int, bits: int) -> None:
        self.write_scalar(code, bits)
        if self.lanes == 64:
            self.write_scalar(NULL if code == NULL else code + 1, bits >> 32)

    @staticmethod
    def mask_of(value: int, lanes: int = LANES) -> np.ndarray:
        """A lane mask as one boolean per lane, lane 0 first (read-only, remembered per value: a kernel uses a
        handful of masks millions of times)."""
        mask = _MASKS.get((value, lanes))
        if mask is None:
            mask = (value >> np.arange(lanes, dtype=np.uint64) & 1).astype(bool)
            mask.flags.writeable = False
            if len(_MASKS) < MASK_CACHE_SIZE:
                _MASKS[value, lanes] = mask
        return mask

    @staticmethod
    def bits_of(mask: np.ndarray) -> int:
        return int(np.sum(mask.astype(np.uint64) << np.arange(len(mask), dtype=np.uint64)))

    # -- scalar operands ---------------------------------------------------------------------------------

    def scalar(self, code: int, literal: int | None, half: bool = False) -> int:
        """A 32-bit scalar source (an SGPR, VCC, M0, EXEC, SCC, an inline constant or the literal)."""
        if TTMP_FIRST <= code <= TTMP_LAST and code not in self.trap_registers:
            raise Unsupported(f"scalar operand code {code} (a trap register)")
        if code < SCALAR_CODES and code != NULL:
            return int(self.sgpr[code])
        if code == NULL:
            return 0
        if code in _INTS:
            return _INTS[code] & 0xFFFFFFFF
        if code in _F32:
            return _F16[code] if half else _F32[code]
        if code == SCC:
            return int(self.scc)
        if code == LITERAL:
            if literal is None:
                raise Unsupported("a literal operand without a literal dword")
            return literal
        raise Unsupported(f"scalar operand code {code}")

    def scalar64(self, code: int, literal: int | None) -> int:
        """A 64-bit scalar source: a register pair, or a constant sign-extended (the literal zero-extended)."""
        if code < SCALAR_CODES and code != NULL:
            return int(self.sgpr[code]) | int(self.sgpr[code + 1]) << 32
        if code in _INTS:
            return _INTS[code] & 0xFFFFFFFFFFFFFFFF
        return self.scalar(code, literal)

    def write_scalar(self, code: int, value: int) -> None:
        if code == NULL:
            return
        if code >= SCALAR_CODES or TTMP_FIRST <= code <= TTMP_LAST:  # trap registers are not the kernel's
            raise Unsupported(f"scalar destination code {code}")
        self.sgpr[code] = value & 0xFFFFFFFF

    def write_scalar64(self, code: int, value: int) -> None:
        self.write_scalar(code, value)
        self.write_scalar(code + 1, value >> 32)

    # -- vector operands ---------------------------------------------------------------------------------

    def vector(self, code: int, literal: int | None, half: bool = False) -> U32:
        """A source for every lane: a VGPR's lanes, or a scalar value repeated (`half`: a 16-bit operand,
        whose float inline constants are binary16)."""
        if code >= AGPR_BASE:
            return self.lane_register(code - VGPR_BASE).copy()
        if code >= VGPR_BASE:
            return self.vgpr[code - VGPR_BASE].copy()
        value = self.scalar(code, literal, half)
        lanes = _BROADCAST.get((value, self.lanes))
        if lanes is None:  # one read-only array per value: addresses and constants repeat across a launch
            lanes = np.full(self.lanes, value, dtype=np.uint32)
            lanes.flags.writeable = False
            if len(_BROADCAST) < MASK_CACHE_SIZE:
                _BROADCAST[value, self.lanes] = lanes
        return lanes

    def lane_register(self, reg: int) -> U32:
        """Vector register number `reg` (VGPR 0-255, AGPR 256-511) as a view of its lanes."""
        if reg < AGPR_REGISTER:
            if reg >= len(self.vgpr):
                raise Unsupported(f"v{reg} is beyond the {len(self.vgpr)} VGPRs the kernel allocates")
            return self.vgpr[reg]
        if reg - AGPR_REGISTER >= len(self.agpr):
            raise Unsupported(f"a{reg - AGPR_REGISTER} is beyond the {len(self.agpr)} AGPRs the kernel allocates")
        return self.agpr[reg - AGPR_REGISTER]

    def write_vgpr(self, reg: int, values: U32, mask: np.ndarray) -> None:
        """Writes vector register number `reg` (a VGPR, or AGPR reg - 256) on the lanes `mask` enables."""
        target = self.vgpr[reg] if reg < len(self.vgpr) else self.lane_register(reg)
        if mask is FULL or mask is FULL64 or mask.all():  # the common case: every lane written
            target[:] = values
        else:
            np.copyto(target, values, where=mask, casting="unsafe")


def dpp_lanes(control: int, lanes: int = LANES) -> tuple[np.ndarray, np.ndarray]:
    """DPP16: (the lane each lane reads, whether that lane is inside its row). Raises on a control the model
    does not implement (DPP_CTRL values from the RDNA3 ISA guide; the wave-wide and row broadcast ones, which
    only GFX9's wave64 has, from the CDNA3 ISA guide's DPP_CTRL table)."""
    ALL_LANES = _ALL[lanes]  # noqa: N806
    lane = np.arange(lanes)
    row_start, in_row = lane & ~15, lane & 15
    if control <= 0xFF:  # quad_perm: each lane picks one lane of its quad
        pick = np.array([control >> 2 * i & 3 for i in range(4)])
        return (lane & ~3) + pick[lane & 3], ALL_LANES
    kind, n = control & ~0xF, control & 0xF
    if kind == 0x100 and n:  # row_shl: lane i reads i + n of its row
        source = in_row + n
        return row_start + np.minimum(source, 15), source < 16
    if kind == 0x110 and n:  # row_shr: lane i reads i - n of its row
        source = in_row - n
        return row_start + np.maximum(source, 0), source >= 0
    if kind == 0x120 and n:  # row_ror: rotate right within the row
        return row_start + ((in_row - n) & 15), ALL_LANES
    if control == 0x140:  # row_mirror
        return row_start + 15 - in_row, ALL_LANES
    if control == 0x141:  # row_half_mirror
        return (lane & ~7) + 7 - (lane & 7), ALL_LANES
    if kind == 0x130 and n in (0, 4, 8, 12) and lanes == 64:  # GFX9 wave_shl, wave_rol, wave_shr, wave_ror by 1
        source = lane + (1 if n < 8 else -1)
        if n in (4, 12):  # rotates
            return source % lanes, ALL_LANES
        return np.clip(source, 0, lanes - 1), (source >= 0) & (source < lanes)
    if control == 0x142 and lanes == 64:  # GFX9 row_bcast:15: lane 15 of the row before (row 0 has none)
        return np.maximum(row_start - 1, 0), lane >= 16
    if control == 0x143 and lanes == 64:  # GFX9 row_bcast:31: lane 31, to rows 2 and 3 (rows 0 and 1: none)
        return np.full(lanes, 31), lane >= 32
    if kind == 0x150:  # row_share (GFX10+), row_newbcast (gfx90a): every lane reads lane n of its row
        return row_start + n, ALL_LANES
    if kind == 0x160:  # row_xmask: lane i reads i xor n within its row
        return row_start + (in_row ^ n), ALL_LANES
    raise Unsupported(f"DPP control {control:#x}")


FULL = Wave.mask_of(0xFFFFFFFF)  # EXEC with every lane on: the one object mask_of returns for it
FULL64 = Wave.mask_of((1 << 64) - 1, 64)  # the same for a wave64
