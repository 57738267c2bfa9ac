"""The CDNA instructions sdpa_cdna and sdpa_cdna_dualwave use beyond the CDNA tables' memory/scalar forms and
MFMA: cross-lane moves (ds_bpermute_b32, ds_swizzle_b32, gfx950's v_permlane16/32_swap_b32), ds_read2_b64, GFX9's
16-bit results (zero-extended), SDWA byte and word selects of 32-bit sources, a few integer operations, and the
launch's split of the unified register file into VGPRs and AGPRs.
Programs are assembled by llvm-mc-22 for the named -mcpu and decoded through the CDNA table; the expected values
are worked out here from the ISA guides' pseudocode (exact integers), never from the model."""

from __future__ import annotations

import struct

import gfx9_asm
import numpy as np
import pytest

from amdgpu_models.core.kernel import Descriptor, Kernel, Program
from amdgpu_models.core.memory import Lds
from amdgpu_models.core.wave import Unsupported, Wave
from amdgpu_models.core.workgroup import Launch, Runner

LANE = np.arange(64, dtype=np.int64)
VCC_LO, VCC_HI = 106, 107
ALL = gfx9_asm.ALL


def run(source: str, mcpu: str = "gfx942", vgpr: dict[int, np.ndarray | int] | None = None,
        sgpr: dict[int, int] | None = None, exec_mask: int = ALL, lds: Lds | None = None) -> Wave:
    """gfx9_asm.run with VGPR values taken modulo 2^32 (negative ones as their two's complement)."""
    wave_vgpr = {reg: np.asarray(values, dtype=np.int64) % 2**32 if not isinstance(values, int) else values
                 for reg, values in (vgpr or {}).items()}
    return gfx9_asm.run(source, mcpu, sgpr, wave_vgpr, exec_mask, lds=lds)


def test_permlane_swaps_exchange_rows_and_halves_of_two_registers() -> None:
    old1, old2 = LANE, 100 + LANE
    wave = run("v_permlane16_swap_b32 v1, v2", "gfx950", {1: old1, 2: old2})
    odd_row = (LANE & 16) != 0  # lanes 16-31 and 48-63
    # src0's (v2) even rows take vdst's (v1) odd rows, and vdst's odd rows src0's even rows
    assert wave.vgpr[2].tolist() == np.where(odd_row, old2, old1 + 16).tolist()
    assert wave.vgpr[1].tolist() == np.where(odd_row, old2 - 16, old1).tolist()
    wave = run("v_permlane32_swap_b32 v1, v2", "gfx950", {1: old1, 2: old2})
    assert wave.vgpr[2].tolist() == np.where(LANE < 32, old1 + 32, old2).tolist()
    assert wave.vgpr[1].tolist() == np.where(LANE < 32, old1, old2 - 32).tolist()
    same = run("v_permlane32_swap_b32 v1, v1", "gfx950", {1: old1})  # one register: its halves swapped
    assert same.vgpr[1].tolist() == np.where(LANE < 32, LANE + 32, LANE - 32).tolist()
    with pytest.raises(Unsupported, match="EXEC"):
        run("v_permlane16_swap_b32 v1, v2", "gfx950", {1: old1, 2: old2}, exec_mask=ALL >> 1)


@pytest.mark.parametrize("mcpu", ["gfx90a", "gfx942"])
def test_ds_bpermute_reads_the_addressed_lane_and_zero_from_an_inactive_one(mcpu: str) -> None:
    off = {3, 10}  # lanes EXEC disables
    exec_mask = ALL & ~sum(1 << lane for lane in off)
    # address 4 * (5 lane % 64) + 256: the lane number is taken modulo 64 after adding offset:8 (2 lanes)
    wave = run("ds_bpermute_b32 v3, v1, v2 offset:8", mcpu, {1: 4 * (5 * LANE % 64) + 256, 2: 1000 + LANE,
                                                             3: 0xDEAD}, exec_mask=exec_mask)
    source = (5 * LANE % 64 + 2) % 64
    expected = np.where(np.isin(source, list(off)), 0, 1000 + source)
    expected = np.where(np.isin(LANE, list(off)), 0xDEAD, expected)  # not written
    assert wave.vgpr[3].tolist() == expected.tolist()


def test_ds_swizzle_bit_mask_and_quad_modes() -> None:
    data = {2: 1000 + LANE}
    swap = run("ds_swizzle_b32 v3, v2 offset:swizzle(SWAP,16)", "gfx942", data)
    assert swap.vgpr[3].tolist() == (1000 + (LANE ^ 16)).tolist()
    broadcast = run("ds_swizzle_b32 v3, v2 offset:swizzle(BROADCAST,8,3)", "gfx942", data)
    assert broadcast.vgpr[3].tolist() == (1000 + ((LANE & ~7) | 3)).tolist()
    quad = run("ds_swizzle_b32 v3, v2 offset:swizzle(QUAD_PERM,3,2,1,0)", "gfx942", data)
    assert quad.vgpr[3].tolist() == (1000 + (LANE & ~3) + 3 - (LANE & 3)).tolist()
    inactive = run("ds_swizzle_b32 v3, v2 offset:swizzle(SWAP,16)", "gfx942", data, exec_mask=ALL & ~(1 << 16))
    assert inactive.vgpr[3][0] == 0 and inactive.vgpr[3][1] == 1000 + 17  # lane 16 off: lane 0 reads 0


def test_ds_read2_b64_reads_two_pairs_at_eight_byte_offsets() -> None:
    lds = Lds.of_size(2048)
    lds.data[:] = np.arange(2048, dtype=np.uint32).astype(np.uint8)
    words = lds.data.view(np.uint32).copy()
    wave = run("ds_read2_b64 v[4:7], v2 offset0:1 offset1:3", "gfx942", {2: 16 * LANE}, lds=lds)
    for reg, byte in ((4, 8), (5, 12), (6, 24), (7, 28)):
        assert wave.vgpr[reg].tolist() == words[(16 * LANE + byte) // 4].tolist()


def _bit_reverse(value: int) -> int:
    return int(f"{value:032b}"[::-1], 2)


def test_integer_operations() -> None:
    values = np.array([1, 0x12345678, 0x80000000, 0xF0F00001] * 16, dtype=np.int64)
    assert run("v_bfrev_b32 v1, v2", vgpr={2: values}).vgpr[1].tolist() == [_bit_reverse(int(v)) for v in values]
    # v_mad_i32_i24: the low 24 bits as signed; 0xFFFFFE is -2, 0x12000003 is 3
    wave = run("v_mad_i32_i24 v1, v2, v3, v4", vgpr={2: 0x00FFFFFE, 3: 0x12000003, 4: 10 + LANE})
    assert wave.vgpr[1].tolist() == (4 + LANE).tolist()
    wave = run("v_mad_i32_i24 v1, v2, v2, 0", vgpr={2: 0x7FFFFF})
    assert wave.vgpr[1][0] == (0x7FFFFF * 0x7FFFFF) % 2**32
    wave = run("v_xad_u32 v1, v2, -1, s37", vgpr={2: LANE}, sgpr={37: 5})
    assert wave.vgpr[1].tolist() == ((5 - LANE - 1) % 2**32).tolist()  # (x ^ 0xffffffff) + s = s - x - 1
    wave = run("v_cmp_lt_i64 vcc, s[14:15], v[4:5]", vgpr={4: LANE - 8, 5: np.where(LANE < 8, -1, 0)},
               sgpr={14: 2**64 - 5})
    assert int(wave.sgpr[VCC_LO]) | int(wave.sgpr[VCC_HI]) << 32 == sum(1 << lane for lane in range(4, 64))


def test_sixteen_bit_results_zero_the_high_half_on_gfx9() -> None:
    wave = run("v_sub_u16 v1, v2, v3", vgpr={1: 0xFFFFFFFF, 2: 0xABCD0005, 3: 0x12340007})
    assert wave.vgpr[1][0] == 0xFFFE
    wave = run("v_mul_lo_u16 v1, 0xab, v2", vgpr={1: 0xFFFFFFFF, 2: 0x10000 + LANE * 1000})
    assert wave.vgpr[1].tolist() == (0xAB * LANE * 1000 % 0x10000).tolist()
    wave = run("v_lshrrev_b16 v1, 11, v2", vgpr={1: 0xFFFFFFFF, 2: 0xFFFF0000 | LANE * 1021})
    assert wave.vgpr[1].tolist() == ((LANE * 1021 & 0xFFFF) >> 11).tolist()


def test_sdwa_byte_and_word_selects_of_32_bit_sources() -> None:
    sdwa = "dst_sel:DWORD dst_unused:UNUSED_PAD"
    wave = run(f"v_mul_u32_u24_sdwa v2, v3, s8 {sdwa} src0_sel:WORD_0 src1_sel:DWORD",
               vgpr={3: 0xFFFF0000 | LANE}, sgpr={8: 0x1556})
    assert wave.vgpr[2].tolist() == (LANE * 0x1556).tolist()
    wave = run(f"v_lshlrev_b32_sdwa v96, v2, v20 {sdwa} src0_sel:DWORD src1_sel:BYTE_0",
               vgpr={2: 4, 20: 0xABCDEF00 | LANE})
    assert wave.vgpr[96].tolist() == (LANE << 4).tolist()
    wave = run(f"v_lshlrev_b32_sdwa v96, v2, v20 {sdwa} src0_sel:BYTE_2 src1_sel:WORD_1",
               vgpr={2: 0x00030000, 20: LANE << 16 | 0xFFFF})
    assert wave.vgpr[96].tolist() == (LANE << 3).tolist()
    wave = run(f"v_mul_lo_u16_sdwa v1, v2, v3 {sdwa} src0_sel:WORD_1 src1_sel:DWORD",
               vgpr={2: LANE << 16 | 0x7777, 3: 12})
    assert wave.vgpr[1].tolist() == (LANE * 12).tolist()


def _scc(source: str, sgpr: dict[int, int]) -> tuple[int, int]:
    """(s1, SCC) after `source`."""
    wave = run(source, sgpr=sgpr)
    return int(wave.sgpr[1]), int(wave.scc)


def test_scalar_operations() -> None:
    assert _scc("s_bfe_u32 s1, s2, 0x40005", {2: 0x12345678}) == ((0x12345678 >> 5) & 0xF, 1)
    assert _scc("s_bfe_u32 s1, s2, 0x30000", {2: 0x12345678}) == (0, 0)
    assert _scc("s_lshl4_add_u32 s1, s2, s3", {2: 0x10000000, 3: 1}) == (1, 1)  # carry out of bit 31
    assert _scc("s_lshl4_add_u32 s1, s2, s3", {2: 0x123, 3: 7}) == (0x1237, 0)
    assert _scc("s_sub_u32 s1, s2, s3", {2: 3, 3: 5}) == (0xFFFFFFFE, 1)  # borrow
    assert _scc("s_sub_u32 s1, s2, s3", {2: 5, 3: 3}) == (2, 0)
    assert _scc("s_cmp_lg_u64 s[2:3], 0", {2: 0, 3: 1})[1] == 1  # the high half counts
    assert _scc("s_cmp_lg_u64 s[2:3], 0", {2: 0, 3: 0})[1] == 0
    assert _scc("s_cmp_eq_u64 s[2:3], s[4:5]", {2: 7, 3: 1, 4: 7, 5: 1})[1] == 1
    assert _scc("s_cmp_eq_u64 s[2:3], s[4:5]", {2: 7, 3: 1, 4: 7, 5: 2})[1] == 0  # the high halves differ


def test_the_launch_splits_the_unified_file_at_accum_offset() -> None:
    """gfx90a/gfx942/gfx950: GRANULATED_WORKITEM_VGPR_COUNT counts VGPRs and AGPRs in blocks of 8; the AGPRs start
    at COMPUTE_PGM_RSRC3.ACCUM_OFFSET ((field + 1) * 4 VGPRs)."""
    rsrc1 = 39 | 3 << 16 | 3 << 18 | 1 << 21 | 1 << 23  # 40 blocks of 8; denormals kept; DX10 clamp; IEEE
    for target, accum_field, split in (("gfx942", 63, (256, 64)), ("gfx90a", 24, (100, 220)),
                                       ("gfx950", 63, (256, 64))):
        raw = struct.pack("<IIII", 0, 0, 0, 0) + struct.pack("<q", 256) + bytes(20) \
            + struct.pack("<IIIHH", accum_field, rsrc1, 0, 1 << 3, 0) + bytes(4)
        kernel = Kernel("k", 256, Descriptor.parse(raw), (), (64, 1, 1), 64)
        program = Program(f"amdgcn-amd-amdhsa--{target}", bytes(4), 0, {"k": kernel})
        runner = Runner(program, kernel, lambda code, address: [])
        assert (runner.vgprs, runner.agprs) == split
        wave = runner._new_wave(Launch(kernel, (1, 1, 1), (64, 1, 1), 0), (0, 0, 0), 0, 64)
        assert (len(wave.vgpr), len(wave.agpr)) == split
