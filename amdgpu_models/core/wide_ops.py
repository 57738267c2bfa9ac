"""GFX9 (CDNA) vector operations whose operands are not one 32-bit value per lane: the packed binary32
operations on VGPR pairs (v_pk_add_f32, v_pk_mul_f32, v_pk_fma_f32, v_pk_mov_b32), the 64-bit move, reading
one lane into an SGPR (v_readlane_b32), and the carry-out adds (v_add_co_u32, v_add_co_ci_u32, GFX9's
v_addc_co_u32), as the CDNA3 ISA guide describes them.

A packed binary32 operation computes two results, each from one register of each source pair: for the low
result (the destination pair's first register) op_sel bit i picks source i's second register instead of its
first and neg_lo bit i negates it; for the high result op_sel_hi and neg_hi do the same. Operands are VGPR
or SGPR pairs: a constant operand is refused (what an inline constant means for the high half is not
modelled).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from amdgpu_models.core.floats import U32, as_f32, bits_of, fma_odd
from amdgpu_models.core.instruction import Fields, Instruction
from amdgpu_models.core.wave import SCALAR_CODES, VCC_LO, VGPR_BASE, Unsupported, Wave

SIGN = np.uint32(0x80000000)


def _pair(wave: Wave, inst: Instruction, code: int) -> tuple[U32, U32]:
    """A source register pair for every lane: (first register, second register)."""
    if code >= VGPR_BASE:
        return wave.vgpr[code - VGPR_BASE], wave.vgpr[code - VGPR_BASE + 1]
    if code < SCALAR_CODES:
        return wave.vector(code, None), wave.vector(code + 1, None)
    raise Unsupported(f"{inst.name} at {inst.address:#x}: a constant operand of a packed 64-bit operation")


def _packed(fn: Callable[..., np.ndarray], sources: int) -> Callable[[Wave, Instruction, Fields], None]:
    def run(wave: Wave, inst: Instruction, f: Fields) -> None:
        pairs = [_pair(wave, inst, f.src[i]) for i in range(sources)]
        halves = []
        for select, negate in ((f.opsel, f.neg), (f.opsel_hi, f.neg_hi)):
            operands = []
            for i, pair in enumerate(pairs):
                bits = pair[select >> i & 1]
                operands.append(as_f32(bits ^ SIGN if negate >> i & 1 else bits))
            with np.errstate(all="ignore"):
                halves.append(bits_of(np.asarray(fn(*operands), dtype=np.float64).astype(np.float32)))
        exec_ = wave.exec_mask
        wave.write_vgpr(f.dst, halves[0], exec_)
        wave.write_vgpr(f.dst + 1, halves[1], exec_)
    return run


def _pk_mov(wave: Wave, inst: Instruction, f: Fields) -> None:
    """v_pk_mov_b32: the low result is src0's register op_sel[0] picks, the high one src1's op_sel[1] picks."""
    low = _pair(wave, inst, f.src[0])[f.opsel & 1].copy()
    high = _pair(wave, inst, f.src[1])[f.opsel >> 1 & 1].copy()
    exec_ = wave.exec_mask
    wave.write_vgpr(f.dst, low, exec_)
    wave.write_vgpr(f.dst + 1, high, exec_)


def _mov_b64(wave: Wave, inst: Instruction, f: Fields) -> None:
    """v_mov_b64: a VGPR or SGPR pair, or an inline integer sign-extended to 64 bits."""
    if inst.dpp is not None:
        raise Unsupported(f"{inst.name} at {inst.address:#x} with DPP")
    code = f.src[0]
    if code >= VGPR_BASE or code < SCALAR_CODES:
        low, high = (values.copy() for values in _pair(wave, inst, code))
    elif 128 <= code <= 208:  # inline integers: 0..64, -1..-16
        value = wave.scalar64(code, None)
        low = np.full(wave.lanes, value & 0xFFFFFFFF, np.uint32)
        high = np.full(wave.lanes, value >> 32, np.uint32)
    else:
        raise Unsupported(f"{inst.name} at {inst.address:#x}: a float or literal 64-bit operand")
    exec_ = wave.exec_mask
    wave.write_vgpr(f.dst, low, exec_)
    wave.write_vgpr(f.dst + 1, high, exec_)


def _readlane(wave: Wave, inst: Instruction, f: Fields) -> None:
    """v_readlane_b32: lane S1 (modulo the wave's width) of the VGPR, to an SGPR, whatever EXEC is."""
    lane = wave.scalar(f.src[1], f.lit(1)) % wave.lanes
    wave.write_scalar(f.dst, int(wave.vector(f.src[0], f.lit(0))[lane]))


def _add_co(with_carry: bool) -> Callable[[Wave, Instruction, Fields], None]:
    """v_add_co_u32: D = S0 + S1, the carry out of bit 31 per lane to VCC (e32) or the scalar destination (e64).
    v_add_co_ci_u32 (GFX9's v_addc_co_u32) adds the carry-in bit: VCC's (e32) or src2's (e64)."""
    def run(wave: Wave, inst: Instruction, f: Fields) -> None:
        if inst.dpp is not None:
            raise Unsupported(f"{inst.name} at {inst.address:#x} with DPP")
        a, b = (wave.vector(f.src[i], f.lit(i)).astype(np.int64) for i in range(2))
        vop3 = inst.encoding == "VOP3"
        total = a + b
        if with_carry:
            total = total + wave.lane_mask(wave.read_mask(f.src[2] if vop3 else VCC_LO)).astype(np.int64)
        exec_ = wave.exec_mask
        wave.write_vgpr(f.dst, (total & 0xFFFFFFFF).astype(np.uint32), exec_)
        wave.write_mask(f.sdst if vop3 else VCC_LO, wave.bits_of((total > 0xFFFFFFFF) & exec_))
    return run


WIDE: dict[str, Callable[[Wave, Instruction, Fields], None]] = {
    "v_pk_add_f32": _packed(lambda a, b: a + b, 2),
    "v_pk_mul_f32": _packed(lambda a, b: a * b, 2),
    "v_pk_fma_f32": _packed(fma_odd, 3),
    "v_pk_mov_b32": _pk_mov,
    "v_mov_b64": _mov_b64,
    "v_readlane_b32": _readlane,
    "v_add_co_u32": _add_co(False),
    "v_add_co_ci_u32": _add_co(True),
}
MNEMONICS = frozenset(WIDE)
