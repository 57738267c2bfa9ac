"""Cross-lane operations of CDNA (wave64): data moved between lanes without going through memory, from the CDNA3
and CDNA4 ISA guides' pseudocode (as tinygrad 0.14.0's cdna tables carry it, read for semantics only).

- `ds_bpermute_b32` (LDS hardware, no LDS access): lane i reads DATA0 of lane ((ADDR_i + offset) / 4) % 64; a
  source lane EXEC disables gives 0; only the lanes EXEC enables are written.
- `ds_swizzle_b32` (GFX9 modes): offset bit 15 set is the quad mode (each lane reads the lane of its group of 4
  that offset's 2-bit field for its position names); else the bit-mask mode within each group of 32 lanes:
  lane i reads lane ((i & and_mask) | or_mask) ^ xor_mask (and_mask offset[4:0], or_mask [9:5], xor_mask
  [14:10]). A source lane EXEC disables gives 0 (the GCN3 guide's `thread_valid[j] ? thread_in[j] : 0`).
- `v_permlane16_swap_b32 vdst, src0` (gfx950): for each 32-lane half, lanes 0-15 of src0 are swapped with lanes
  16-31 of vdst; `v_permlane32_swap_b32`: lanes 0-31 of src0 with lanes 32-63 of vdst. Both registers are
  written. The pseudocode reads no EXEC; the model runs them only with every lane on (an assumption it does not
  guess past: any other EXEC stops the run), and neither bound_ctrl nor fetch-inactive (VOP3 only) is modelled.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from amdgpu_models.core.instruction import Fields, Instruction
from amdgpu_models.core.wave import VGPR_BASE, Unsupported, Wave

QUAD_MODE = 0x8000


def _where(inst: Instruction) -> str:
    return f"{inst.name} at {inst.address:#x}"


def _gather(wave: Wave, values: np.ndarray, sources: np.ndarray, dst: int) -> None:
    """Lane i of `dst` = `values` of lane sources[i], 0 when that lane is off; written where EXEC is on."""
    active = wave.exec_mask
    out = np.where(active[sources], values[sources], np.uint32(0)).astype(np.uint32)
    wave.write_vgpr(dst, out, active)


def _bpermute(wave: Wave, inst: Instruction, f: Fields) -> None:
    offset = f.offsets[0] | f.offsets[1] << 8
    sources = ((wave.vgpr[f.addr].astype(np.int64) + offset) // 4 % wave.lanes).astype(np.int64)
    _gather(wave, wave.vgpr[f.data[0]], sources, f.dst)


def swizzle_lanes(offset: int, lanes: int) -> np.ndarray:
    """The lane each lane of ds_swizzle_b32 reads, for GFX9's two modes."""
    lane = np.arange(lanes)
    if offset & QUAD_MODE:
        pick = np.array([offset >> 2 * i & 3 for i in range(4)])
        return (lane & ~3) + pick[lane & 3]
    and_mask, or_mask, xor_mask = offset & 0x1F, offset >> 5 & 0x1F, offset >> 10 & 0x1F
    return (lane & ~31) + (((lane & 31 & and_mask) | or_mask) ^ xor_mask)


def _swizzle(wave: Wave, inst: Instruction, f: Fields) -> None:
    offset = f.offsets[0] | f.offsets[1] << 8
    _gather(wave, wave.vgpr[f.addr], swizzle_lanes(offset, wave.lanes), f.dst)


# DS-encoded lane operations, (wave, instruction, fields): fields.dst the destination VGPR, addr the address VGPR
# (ds_swizzle: the data), data the DATA0 VGPR, offsets the 16-bit offset as (low byte, high byte).
DS: dict[str, Callable[[Wave, Instruction, Fields], None]] = {
    "ds_bpermute_b32": _bpermute,
    "ds_swizzle_b32": _swizzle,
}


def _swap(low: np.ndarray, span: int) -> Callable[[Wave, Instruction, Fields], None]:
    """A permlane swap: src0's lanes `low` with vdst's lanes `low + span`."""

    def run(wave: Wave, inst: Instruction, f: Fields) -> None:
        if wave.lanes != 64:
            raise Unsupported(f"{_where(inst)} on a wave of {wave.lanes} lanes")
        if not wave.exec_mask.all():
            raise Unsupported(f"{_where(inst)} with EXEC {wave.read_mask(126):#x} (modelled with every lane on)")
        if inst.encoding != "VOP32" or inst.dpp is not None:
            raise Unsupported(f"{_where(inst)}: only the e32 form is modelled")
        src, dst = f.src[0], f.dst
        if src < VGPR_BASE or max(src - VGPR_BASE, dst) >= len(wave.vgpr):
            raise Unsupported(f"{_where(inst)}: operands v{dst}, code {src} are not the kernel's VGPRs")
        a, d = wave.vgpr[src - VGPR_BASE], wave.vgpr[dst]  # views: the same array when src0 is vdst
        held = a[low].copy()
        a[low] = d[low + span]
        d[low + span] = held
    return run


_LANE = np.arange(64)
VECTOR: dict[str, Callable[[Wave, Instruction, Fields], None]] = {
    "v_permlane16_swap_b32": _swap(_LANE[(_LANE & 16) == 0], 16),  # lanes 0-15 and 32-47
    "v_permlane32_swap_b32": _swap(_LANE[:32], 32),
}
