"""The CDNA model (amdgpu_models/isa/cdna.py over the shared core): each GFX9 mnemonic the tables add, on programs
LLVM's assembler encodes for gfx90a, gfx942 or gfx950 and runs on a wave64. Expected values are worked out here
from the operations' documented behaviour (the CDNA3 ISA guide; exact binary32 values), never from the model."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from exact_floats import bits, value
from gfx9_asm import ALL, MCPUS, pair, run

from amdgpu_models.core.memory import Lds, Memory
from amdgpu_models.core.wave import Unsupported
from amdgpu_models.core.workgroup import Runner
from amdgpu_models.isa import cdna, gfx90a, gfx942, gfx950
from farm.emulate import rmsnorm_check
from farm.emulate.launch import load

LANE = np.arange(64)
LOW_HALF = (1 << 32) - 1
F16_ONE, F16_MINUS_2_5 = 0x3C00, 0xC100


def lanes(wave, reg: int) -> list[int]:  # noqa: ANN001
    return [int(v) for v in wave.vgpr[reg]]


# -- the tables -------------------------------------------------------------------------------------------------

def test_the_three_targets_share_one_table_but_their_only_sets() -> None:
    assert gfx90a.ISA is cdna.ISAS["gfx90a"] and gfx942.ISA.lanes == gfx950.ISA.lanes == 64
    assert gfx942.ISA.semantics("buffer_load_dwordx4") == ("buffer_load_b128", "memory")
    assert gfx942.ISA.semantics("v_add_u32") == ("v_add_nc_u32", "vector")
    assert gfx942.ISA.semantics("buffer_load_b128") is None  # RDNA's name is not a GFX9 mnemonic
    assert gfx942.ISA.semantics("v_cmpx_eq_u32") is None  # GFX9's v_cmpx also writes VCC: not modelled
    assert gfx90a.ISA.semantics("v_mov_b64") is None and gfx942.ISA.semantics("v_mov_b64")
    assert gfx942.ISA.semantics("v_cvt_pk_bf16_f32") is None and gfx950.ISA.semantics("v_cvt_pk_bf16_f32")
    assert all(isa.aliases.items() >= cdna.ALIASES.items() for isa in cdna.ISAS.values())  # GFX9's names: shared


# -- scalar: 64-bit masks ---------------------------------------------------------------------------------------

A64, B64 = 0xF0F0_0000_FFFF_0001, 0x0FF0_0001_00FF_0003


@pytest.mark.parametrize("mcpu", MCPUS)
def test_64_bit_scalar_logic(mcpu: str) -> None:
    wave = run("s_mov_b64 s[2:3], s[4:5]\ns_and_b64 s[6:7], s[4:5], s[8:9]\ns_or_b64 s[10:11], s[4:5], s[8:9]\n"
               "s_xor_b64 s[12:13], s[4:5], s[8:9]\ns_andn2_b64 s[14:15], s[4:5], s[8:9]", mcpu,
               sgpr={4: A64, 8: B64})
    assert pair(wave, 2) == A64
    assert pair(wave, 6) == A64 & B64
    assert pair(wave, 10) == A64 | B64
    assert pair(wave, 12) == A64 ^ B64
    assert pair(wave, 14) == A64 & ~B64 & (1 << 64) - 1 and wave.scc  # not zero
    assert not run("s_and_b64 s[2:3], s[4:5], 0", sgpr={4: A64}).scc
    assert run("s_andn2_b32 s2, s3, s4", sgpr={3: 0xFF00FF, 4: 0xF0000F}).sgpr[2] == 0x0F00F0


def test_s_cselect_b64_follows_scc() -> None:
    assert pair(run("s_cselect_b64 s[0:1], -1, 0", scc=True), 0) == (1 << 64) - 1  # -1 sign-extended
    assert pair(run("s_cselect_b64 s[0:1], -1, 0", scc=False), 0) == 0
    assert pair(run("s_cselect_b64 s[0:1], s[4:5], 0", sgpr={4: A64}, scc=True), 0) == A64


def test_s_and_saveexec_b64_saves_the_whole_exec_pair() -> None:
    old = 0xFFFF_0000_FFFF_0000
    wave = run("s_and_saveexec_b64 s[2:3], s[4:5]\nv_mov_b32 v0, 1", sgpr={4: 0x0000_FFFF_FFFF_0000},
               vgpr={0: 0}, exec_mask=old)
    assert pair(wave, 2) == old
    assert pair(wave, 126) == 0x0000_0000_FFFF_0000 and wave.scc
    assert lanes(wave, 0) == [int(16 <= i < 32) for i in range(64)]


# -- vector: integers -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mcpu", MCPUS)
def test_carry_out_adds_write_a_lane_mask_pair(mcpu: str) -> None:
    carries = ALL & ~0xFFFF  # 0xFFFFFFF0 + i overflows for i >= 16
    wave = run("v_add_co_u32 v1, vcc, v2, v3\nv_addc_co_u32 v4, vcc, v5, v6, vcc\n"
               "v_add_co_u32_e64 v7, s[4:5], v2, v3\nv_addc_co_u32_e64 v8, s[6:7], v5, v6, s[4:5]", mcpu,
               vgpr={2: 0xFFFFFFF0, 3: LANE, 5: 0xFFFFFFFF, 6: 0})
    assert lanes(wave, 1) == lanes(wave, 7) == [(0xFFFFFFF0 + i) % 2**32 for i in range(64)]
    assert lanes(wave, 4) == lanes(wave, 8) == [0 if i >= 16 else 0xFFFFFFFF for i in range(64)]
    assert pair(wave, 106) == pair(wave, 4) == pair(wave, 6) == carries
    partial = run("v_add_co_u32 v1, vcc, v2, v3", mcpu, vgpr={2: 0xFFFFFFF0, 3: LANE}, exec_mask=LOW_HALF)
    assert pair(partial, 106) == carries & LOW_HALF  # inactive lanes carry nothing


def test_gfx9_names_of_the_plain_integer_operations() -> None:
    wave = run("v_add_u32 v1, v2, v3\nv_sub_u32 v4, v2, v3\nv_subrev_u32 v5, v2, v3\n"
               "v_subb_co_u32 v6, vcc, v2, v3, vcc", vgpr={2: 10, 3: LANE}, sgpr={106: 1 << 63 | 1})
    assert lanes(wave, 1) == [10 + i for i in range(64)]
    assert lanes(wave, 4) == [(10 - i) % 2**32 for i in range(64)]
    assert lanes(wave, 5) == [(i - 10) % 2**32 for i in range(64)]
    # v_subb_co_u32: 10 - i - borrow in (lanes 0 and 63), the borrow out where that is negative
    assert lanes(wave, 6) == [(10 - i - (i in (0, 63))) % 2**32 for i in range(64)]
    assert pair(wave, 106) == sum(1 << i for i in range(64) if 10 - i - (i in (0, 63)) < 0)


def test_v_readlane_b32_reads_one_lane_whatever_exec_is() -> None:
    wave = run("v_readlane_b32 s1, v2, 37\nv_readlane_b32 s5, v2, s3", vgpr={2: 1000 + LANE}, sgpr={3: 64 + 5},
               exec_mask=0)
    assert wave.sgpr[1] == 1037
    assert wave.sgpr[5] == 1005  # the lane select modulo 64


def test_v_perm_b32_selects_bytes_of_both_sources() -> None:
    # {S0, S1}: bytes 0-3 are S1's (0x44 0x33 0x22 0x11), bytes 4-7 S0's (0xBB 0xAA 0x99 0x88)
    wave = run("v_perm_b32 v1, v2, v3, v4\nv_perm_b32 v5, v2, v3, v6\nv_perm_b32 v7, v2, v3, v8",
               vgpr={2: 0x8899AABB, 3: 0x11223344, 4: 0x0C070005, 6: 0x0D0B0A09, 8: 0x08FF0603})
    assert lanes(wave, 1) == [0x008844AA] * 64  # byte selects 5, 0, 7 and 12 (zero)
    assert lanes(wave, 5) == [0xFFFFFF00] * 64  # sign of S1 byte 3 (0x11), S0 byte 1 (0xAA), S0 byte 3, 13
    assert lanes(wave, 7) == [0x00FF9911] * 64  # byte 3, byte 6, 0xFF (255), sign of S1 byte 1 (0x33)
    # selectors 8-11 against bytes whose neighbours have the other sign: {S0, S1} bytes 44 93 A2 11 65 9C F7 08
    wave = run("v_perm_b32 v1, v2, v3, v4", vgpr={2: 0x08F79C65, 3: 0x11A29344, 4: 0x0B0A0908})
    assert lanes(wave, 1) == [0x00FF00FF] * 64  # signs of bytes 1 (0x93), 3 (0x11), 5 (0x9C), 7 (0x08)


def test_v_pack_b32_f16_joins_two_halves() -> None:
    wave = run("v_pack_b32_f16 v1, v2, v3\nv_pack_b32_f16 v4, v2, v3 op_sel:[1,0]",
               vgpr={2: 0x1234_5678, 3: 0xABCD_EF01})
    assert lanes(wave, 1) == [0xEF01_5678] * 64
    assert lanes(wave, 4) == [0xEF01_1234] * 64  # op_sel[0]: src0's high half


def test_gfx950_packed_conversions_round_to_nearest_even() -> None:
    f32 = [bits(1.0), bits(-2.5), bits(1 + 2**-11), bits(1 + 3 * 2**-11)]
    wave = run("v_cvt_pk_f16_f32 v1, v2, v3", "gfx950", vgpr={2: f32 * 16, 3: f32[::-1] * 16})
    # 1 + 2^-11 is halfway between 1 and 1 + 2^-10: to 1.0; 1 + 3*2^-11 halfway up to 1 + 2^-9 (even)
    expected = [F16_ONE, F16_MINUS_2_5, 0x3C00, 0x3C02]
    assert lanes(wave, 1)[:4] == [expected[i] | expected[3 - i] << 16 for i in range(4)]
    bf = [bits(1.0), 0x3F808000, 0x3F818000, 0x7F800001, 0x7F7FFFFF, 0x80000000]
    wave = run("v_cvt_pk_bf16_f32 v1, v2, v3", "gfx950", vgpr={2: (bf + [0, 0]) * 8, 3: 0x40490FDB})
    # ties to even (0x3F80, 0x3F82), a NaN stays a quiet NaN, the largest binary32 rounds to infinity
    assert [v & 0xFFFF for v in lanes(wave, 1)[:6]] == [0x3F80, 0x3F80, 0x3F82, 0x7FC0, 0x7F80, 0x8000]
    assert {v >> 16 for v in lanes(wave, 1)} == {0x4049}  # pi: 0x40490FDB rounds down


# -- vector: packed binary32 on register pairs -------------------------------------------------------------------

@pytest.mark.parametrize("mcpu", MCPUS)
def test_packed_f32_add_mul_fma_on_register_pairs(mcpu: str) -> None:
    x = 1 + 2**-12
    wave = run("v_pk_add_f32 v[0:1], v[2:3], v[4:5]\nv_pk_mul_f32 v[6:7], v[2:3], v[4:5] op_sel_hi:[0,1]\n"
               "v_pk_fma_f32 v[8:9], v[2:3], v[4:5], v[10:11] neg_lo:[0,0,1]\n"
               "v_pk_fma_f32 v[12:13], v[2:3], v[4:5], v[10:11] op_sel:[1,0,0] neg_hi:[1,0,0]\n"
               "v_pk_fma_f32 v[14:15], v[16:17], v[16:17], v[18:19]", mcpu,
               vgpr={2: bits(3.0), 3: bits(5.0), 4: bits(0.5), 5: bits(-4.0), 10: bits(1.0), 11: bits(2.0),
                     16: bits(x), 17: bits(x), 18: bits(-1.0), 19: bits(0.0)})
    assert [value(int(wave.vgpr[r][0])) for r in range(2)] == [3.5, 1.0]
    assert [value(int(wave.vgpr[r][0])) for r in (6, 7)] == [1.5, -12.0]  # high: src0's low register (op_sel_hi 0)
    assert [value(int(wave.vgpr[r][0])) for r in (8, 9)] == [0.5, -18.0]  # low: 3*0.5 - 1; high: 5*-4 + 2
    assert [value(int(wave.vgpr[r][0])) for r in (12, 13)] == [3.5, 22.0]  # low: 5*0.5 + 1; high: (-5)*(-4) + 2
    # one rounding: x*x - 1 = 2^-11 + 2^-24 exactly (x*x alone rounds to 1 + 2^-11)
    assert value(int(wave.vgpr[14][0])) == 2**-11 + 2**-24 and value(int(wave.vgpr[15][0])) == 1 + 2**-11


def test_v_pk_mov_b32_and_v_mov_b64() -> None:
    wave = run("v_pk_mov_b32 v[0:1], v[2:3], v[4:5] op_sel:[1,0]\nv_mov_b64 v[6:7], v[2:3]\n"
               "v_mov_b64 v[8:9], s[10:11]\nv_mov_b64 v[12:13], -1", vgpr={2: LANE, 3: 100 + LANE, 4: 7, 5: 9},
               sgpr={10: 0x1234_5678_9ABC_DEF0}, exec_mask=LOW_HALF)
    assert lanes(wave, 0)[:32] == [100 + i for i in range(32)] and lanes(wave, 1)[:32] == [7] * 32
    assert lanes(wave, 6)[:32] == list(range(32)) and lanes(wave, 7)[:32] == [100 + i for i in range(32)]
    assert lanes(wave, 8)[0] == 0x9ABC_DEF0 and lanes(wave, 9)[0] == 0x1234_5678
    assert lanes(wave, 12)[0] == lanes(wave, 13)[0] == 0xFFFFFFFF  # sign-extended
    assert lanes(wave, 0)[32:] == [0] * 32 and lanes(wave, 13)[32:] == [0] * 32  # EXEC's upper half is off


# -- DPP and SDWA -------------------------------------------------------------------------------------------------

OLD = 0xDEAD


@pytest.mark.parametrize("mcpu", MCPUS)
def test_gfx9_dpp_row_broadcasts_and_wave_shifts(mcpu: str) -> None:
    wave = run("v_mov_b32_dpp v1, v0 row_bcast:15 row_mask:0xa bank_mask:0xf\n"
               "v_mov_b32_dpp v2, v0 row_bcast:31 row_mask:0xc bank_mask:0xf\n"
               "v_mov_b32_dpp v3, v0 wave_shr:1 row_mask:0xf bank_mask:0xf\n"
               "v_mov_b32_dpp v4, v0 wave_shl:1 row_mask:0xf bank_mask:0xf bound_ctrl:1\n"
               "v_mov_b32_dpp v5, v0 wave_rol:1 row_mask:0xf bank_mask:0xf\n"
               "v_mov_b32_dpp v6, v0 wave_ror:1 row_mask:0xf bank_mask:0xf\n"
               "v_add_f32_dpp v7, v8, v8 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1", mcpu,
               vgpr={0: LANE, 1: OLD, 2: OLD, 3: OLD, 4: OLD, 5: OLD, 6: OLD, 8: [bits(float(i)) for i in range(64)]})
    assert lanes(wave, 1) == [OLD] * 16 + [15] * 16 + [OLD] * 16 + [47] * 16  # rows 1 and 3: the row before's 15
    assert lanes(wave, 2) == [OLD] * 32 + [31] * 32
    assert lanes(wave, 3) == [OLD] + list(range(63))  # lane 0 reads outside the wave: not written
    assert lanes(wave, 4) == list(range(1, 64)) + [0]  # bound_ctrl: lane 63 reads 0
    assert lanes(wave, 5) == list(range(1, 64)) + [0]
    assert lanes(wave, 6) == [63] + list(range(63))
    # row_shr:1 within each row of 16, bound_ctrl: the row's first lane adds 0
    assert [value(int(v)) for v in wave.vgpr[7]] == [float(i + (i - 1 if i % 16 else 0)) for i in range(64)]


def test_sdwa_word_selects_of_a_16_bit_source() -> None:
    wave = run("v_cvt_f32_f16_sdwa v1, v2 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_1\n"
               "v_cvt_f32_f16_sdwa v3, v2 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:WORD_0",
               vgpr={2: F16_ONE << 16 | F16_MINUS_2_5})
    assert value(int(wave.vgpr[1][0])) == 1.0 and value(int(wave.vgpr[3][63])) == -2.5
    with pytest.raises(Unsupported, match="dst_sel"):
        run("v_cvt_f32_f16_sdwa v1, v2 dst_sel:WORD_1 dst_unused:UNUSED_PAD src0_sel:WORD_1")


# -- memory -------------------------------------------------------------------------------------------------------

DWORDS = np.arange(64, dtype=np.uint32) + 0x100  # dword k of the buffer holds 0x100 + k
WORD3 = 0x00027000  # GFX9's raw dword buffer: DATA_FORMAT 32, NUM_FORMAT float; no OOB_SELECT on GFX9


def _buffer(records: int, word1_high: int = 0, word3: int = WORD3) -> tuple[Memory, int, dict[int, int]]:
    memory = Memory()
    base = memory.allocate("buffer", DWORDS.tobytes())
    return memory, base, {4: base & 0xFFFFFFFF, 5: base >> 32 | word1_high << 16, 6: records, 7: word3}


@pytest.mark.parametrize("mcpu", MCPUS)
def test_buffer_range_check_leaves_soffset_out(mcpu: str) -> None:
    memory, _, sgpr = _buffer(40)
    wave = run("buffer_load_dword v1, v0, s[4:7], s8 offen offset:4", mcpu, sgpr={**sgpr, 8: 8},
               vgpr={0: 4 * LANE}, memory=memory)
    # address base + 8 + 4 + 4i: in range while 4 + 4i < 40 (the CDNA3 guide's raw check, soffset not in it)
    assert lanes(wave, 1) == [0x100 + 3 + i if 4 + 4 * i < 40 else 0 for i in range(64)]


def test_buffer_multi_dword_loads_are_checked_per_dword() -> None:
    memory, _, sgpr = _buffer(40)
    wave = run("buffer_load_dwordx4 v[4:7], v0, s[4:7], 0 offen\nbuffer_load_dwordx2 v[8:9], off, s[4:7], 0 "
               "offset:36\nbuffer_load_ushort v10, v1, s[4:7], 0 offen", sgpr=sgpr, vgpr={0: 16 * LANE, 1: 2 * LANE},
               memory=memory)
    for k in range(4):
        assert lanes(wave, 4 + k)[:4] == [0x100 + 4 * i + k if 16 * i + 4 * k < 40 else 0 for i in range(4)]
    assert lanes(wave, 8)[0] == 0x100 + 9 and lanes(wave, 9)[0] == 0  # offset 36 in range, 40 not
    shorts = np.frombuffer(DWORDS.tobytes(), dtype="<u2")
    assert lanes(wave, 10)[:21] == [int(shorts[i]) if 2 * i < 40 else 0 for i in range(21)]
    memory, _, sgpr = _buffer(38)  # the guide checks where a dword starts: at 36 it is in range, at 40 not
    wave = run("buffer_load_dword v1, v0, s[4:7], 0 offen", sgpr=sgpr, vgpr={0: 4 * LANE}, memory=memory)
    assert lanes(wave, 1)[8:11] == [0x108, 0x109, 0]


def test_buffer_stores_drop_what_is_out_of_range() -> None:
    memory, base, sgpr = _buffer(24)
    run("buffer_store_dword v1, v0, s[4:7], 0 offen\nbuffer_store_short v2, v3, s[4:7], s9 offen offset:32\n"
        "buffer_store_dwordx4 v[4:7], off, s[4:7], 0 offset:16\nbuffer_store_dwordx2 v[4:5], off, s[4:7], 0",
        sgpr={**sgpr, 9: 4}, vgpr={0: 4 * LANE, 1: 0xAAAA0000 + LANE, 2: 0x7777BEEF, 3: 0, 4: 1, 5: 2, 6: 3, 7: 4},
        exec_mask=0xFF, memory=memory)
    data = memory.contents(base).view(np.uint32)
    # dwords 0-5 from lanes 0-5 (offset < 24), then dwordx4 at 16: dwords 4 and 5 in range, 6 and 7 dropped;
    # the short at 32 (+ soffset 4 in the address) is past the 24 records; dwordx2 at 0 overwrites 0 and 1
    expected = [1, 2, 0xAAAA0002, 0xAAAA0003, 1, 2, 0x106, 0x107, 0x108, 0x109]
    assert [int(v) for v in data[:10]] == expected


def test_a_buffer_that_is_not_raw_is_refused() -> None:
    memory, _, sgpr = _buffer(40, word1_high=1 << 15)  # word 1 bit 31: SWIZZLE_ENABLE
    with pytest.raises(Unsupported, match="swizzle 1"):
        run("buffer_load_dword v1, v0, s[4:7], 0 offen", sgpr=sgpr, memory=memory)
    memory, _, sgpr = _buffer(40, word1_high=16)  # a stride of 16
    with pytest.raises(Unsupported, match="stride 16"):
        run("buffer_load_dword v1, v0, s[4:7], 0 offen", sgpr=sgpr, memory=memory)


@pytest.mark.parametrize("mcpu", MCPUS)
def test_global_loads_and_stores(mcpu: str) -> None:
    memory = Memory()
    base = memory.allocate("buffer", DWORDS.tobytes())
    out = memory.allocate("out", bytes(64))
    wave = run("global_load_dwordx4 v[4:7], v2, s[4:5] offset:16\nglobal_load_dword v8, v[10:11], off offset:-4\n"
               "global_load_dwordx2 v[12:13], v2, s[4:5]\n"
               "global_store_dwordx2 v[14:15], v[4:5], off\nglobal_store_dword v2, v8, s[16:17] offset:8\n"
               "global_store_dwordx4 v2, v[4:7], s[16:17] offset:32", mcpu,
               sgpr={4: base, 16: out}, vgpr={2: 0, 10: (base + 8) & 0xFFFFFFFF, 11: (base + 8) >> 32,
                                               14: out & 0xFFFFFFFF, 15: out >> 32}, exec_mask=1, memory=memory)
    assert [lanes(wave, r)[0] for r in (4, 5, 6, 7, 8, 12, 13)] == [0x104, 0x105, 0x106, 0x107, 0x101, 0x100, 0x101]
    stored = [int(v) for v in memory.contents(out).view(np.uint32)]
    assert stored == [0x104, 0x105, 0x101, 0, 0, 0, 0, 0, 0x104, 0x105, 0x106, 0x107, 0, 0, 0, 0]


@pytest.mark.parametrize("mcpu", MCPUS)
def test_lds_reads_and_writes(mcpu: str) -> None:
    lds = Lds.of_size(8192)
    wave = run("ds_write_b32 v0, v1 offset:4\nds_write_b64 v0, v[2:3] offset:8\nds_write2_b32 v0, v1, v2 "
               "offset0:5 offset1:7\nds_write_b16 v0, v4 offset:32\nds_write_b16_d16_hi v0, v4 offset:34\n"
               "ds_write_b128 v5, v[8:11] offset:16\nds_write2_b64 v5, v[8:9], v[10:11] offset0:4 offset1:6\n"
               "ds_read_b32 v12, v0 offset:4\nds_read_b64 v[14:15], v0 offset:8\nds_read_b96 v[16:18], v5 offset:16\n"
               "ds_read_b64 v[20:21], v5 offset:32\nds_read_b64 v[22:23], v5 offset:48\n"
               "ds_read2_b32 v[24:25], v0 offset0:5 offset1:7\nds_read_b32 v28, v0 offset:32", mcpu,
               vgpr={0: 64 * LANE, 1: 1000 + LANE, 2: 2000 + LANE, 3: 3000 + LANE, 4: 0xAAAA5555,
                     5: 64 * 64, 8: 11, 9: 12, 10: 13, 11: 14}, exec_mask=1, lds=lds)
    assert [lanes(wave, r)[0] for r in (12, 14, 15, 16, 17, 18)] == [1000, 2000, 3000, 11, 12, 13]
    assert [lanes(wave, r)[0] for r in (20, 21, 22, 23)] == [11, 12, 13, 14]  # ds_write2_b64: offsets of 8 bytes
    assert [lanes(wave, r)[0] for r in (24, 25)] == [1000, 2000]  # dwords 5 and 7
    assert lanes(wave, 28)[0] == 0xAAAA5555  # v4's low half stored at 32, its high half (d16_hi) at 34


def test_lds_read2st64_counts_offsets_in_64_dwords() -> None:
    lds = Lds.of_size(1024)
    lds.data.view(np.uint32)[:] = np.arange(256)  # dword k holds k
    wave = run("ds_read2st64_b32 v[2:3], v0 offset0:1 offset1:2", vgpr={0: 4 + 8 * LANE}, exec_mask=ALL, lds=lds)
    assert lanes(wave, 2)[:3] == [65, 67, 69]  # bytes 4 + 8i + 1 * 256: dword 1 + 2i + 64
    assert lanes(wave, 3)[:3] == [129, 131, 133]  # + 2 * 256


def test_scalar_loads_of_1_to_16_dwords() -> None:
    memory = Memory()
    base = memory.allocate("constants", DWORDS.tobytes())
    wave = run("s_load_dword s1, s[2:3], 0x10\ns_load_dwordx2 s[4:5], s[2:3], s6\ns_load_dwordx4 s[8:11], s[2:3], 0x0\n"
               "s_load_dwordx8 s[12:19], s[2:3], 0x20\ns_load_dwordx16 s[20:35], s[2:3], 0x40\ns_waitcnt lgkmcnt(0)",
               sgpr={2: base, 6: 8}, memory=memory)
    assert wave.sgpr[1] == 0x104 and list(wave.sgpr[4:6]) == [0x102, 0x103]
    assert list(wave.sgpr[8:12]) == [0x100 + k for k in range(4)]
    assert list(wave.sgpr[12:20]) == [0x108 + k for k in range(8)]
    assert list(wave.sgpr[20:36]) == [0x110 + k for k in range(16)]


# -- the launch ----------------------------------------------------------------------------------------------------

def _object(built: Path, target: str) -> Path:
    found = sorted((built / "outputs" / "rmsnorm" / target).glob("*bf16*generic.hsaco"))
    assert found, target
    return found[0]


@pytest.mark.parametrize("mcpu", MCPUS)
def test_a_cdna_rmsnorm_object_launches_as_wave64_and_is_within(built: Path, mcpu: str) -> None:
    path = _object(built, mcpu)
    program = load(path.read_bytes())
    kernel = program.kernels["rmsnorm_fwd_0"]
    assert not kernel.descriptor.wave32 and kernel.wavefront_size == 64
    decoder = {"gfx90a": gfx90a, "gfx942": gfx942, "gfx950": gfx950}[mcpu].decode
    from gfx9_asm import assembler  # noqa: PLC0415
    case = rmsnorm_check.Case(2, 999, 1e-3, 0.05)
    knobs = {"dtype": "bf16", "phase": "infer"}
    outcome = rmsnorm_check.run_forward(program, knobs, case, np.random.default_rng(1),
                                        lambda code, address: decoder(code, address, assembler()))
    assert [m.error <= m.bound for m in outcome.measures] == [True]
    assert Runner(program, kernel, lambda code, address: decoder(code, address, assembler())).lanes == 64


def test_descriptor_float_settings_the_model_does_not_have_are_refused(built: Path) -> None:
    program = load(_object(built, "gfx942").read_bytes())
    kernel = program.kernels["rmsnorm_fwd_0"]
    rsrc1 = kernel.descriptor.rsrc1
    for changed, reason in ((rsrc1 & ~(1 << 21), "DX10_CLAMP off"), (rsrc1 | 1 << 26, "FP16_OVFL"),
                            (rsrc1 & ~(1 << 23), "only IEEE mode")):
        odd = replace(kernel, descriptor=replace(kernel.descriptor, rsrc1=changed))
        with pytest.raises(Unsupported, match=reason):
            Runner(program, odd, lambda code, address: [])
