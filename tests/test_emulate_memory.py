"""Memory on the model: kernel-argument loads, raw buffers with the descriptor's NUM_RECORDS, global stores,
LDS, bounds errors, and a workgroup whose waves meet at s_barrier. Programs come from LLVM's assembler."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from gfx11_asm import assemble, decoder, instructions, launch_with_output

from amdgpu_models.core.memory import BoundsError, Lds, Memory
from amdgpu_models.core.step import run_program
from amdgpu_models.core.wave import Unsupported, Wave
from amdgpu_models.core.workgroup import Launch, Runner
from farm.emulate.launch import Descriptor, Kernel, Program

RAW_BUFFER_WORD3 = 0x31027000  # what the kernels put in a descriptor's last word: OOB_SELECT 3, raw


def wave_with(sgpr: dict[int, int], vgpr: dict[int, list[int] | int] | None = None) -> Wave:
    wave = Wave()
    wave.sgpr[126] = 0xFFFFFFFF
    for reg, value in sgpr.items():
        wave.sgpr[reg] = value & 0xFFFFFFFF
    for reg, values in (vgpr or {}).items():
        wave.vgpr[reg] = values
    return wave


def descriptor_sgprs(base: int, records: int, first: int = 4) -> dict[int, int]:
    return {first: base & 0xFFFFFFFF, first + 1: base >> 32, first + 2: records, first + 3: RAW_BUFFER_WORD3}


def test_scalar_loads_read_the_kernel_arguments() -> None:
    memory = Memory()
    at = memory.allocate("kernarg", struct.pack("<IIIIf", 7, 8, 9, 10, 0.5) + bytes(12))
    wave = wave_with({0: at & 0xFFFFFFFF, 1: at >> 32})
    program = "s_load_b128 s[4:7], s[0:1], 0x0\ns_load_b32 s8, s[0:1], 0x10\ns_load_b256 s[12:19], s[0:1], 0x0\n" \
              "s_load_b64 s[20:21], s[0:1], 0x8\ns_endpgm"
    run_program(wave, instructions(program), memory, Lds.of_size(0))
    assert [int(v) for v in wave.sgpr[4:9]] == [7, 8, 9, 10, 0x3F000000]
    assert [int(v) for v in wave.sgpr[12:22]] == [7, 8, 9, 10, 0x3F000000, 0, 0, 0, 9, 10]
    wave = wave_with({0: at & 0xFFFFFFFF, 1: at >> 32})
    with pytest.raises(BoundsError, match="s_load_b32"):
        run_program(wave, instructions("s_load_b32 s8, s[0:1], 0x20\ns_endpgm"), memory, Lds.of_size(0))


def test_raw_buffer_reads_zero_and_drops_stores_past_num_records() -> None:
    memory = Memory()
    data = np.arange(100, 164, dtype=np.uint32)  # 64 dwords, 256 bytes
    at = memory.allocate("buf", data.tobytes())
    # NUM_RECORDS 40 bytes: dwords 0-9 are inside, the rest read 0 and are not written
    wave = wave_with(descriptor_sgprs(at, 40), {0: (np.arange(32) * 4).astype(np.uint32)})
    program = "buffer_load_b32 v1, v0, s[4:7], 0 offen\nbuffer_load_b128 v[2:5], v0, s[4:7], 0 offen offset:4\n" \
              "v_mov_b32 v6, 7\nbuffer_store_b32 v6, v0, s[4:7], 0 offen\ns_endpgm"
    # the b128 store below: dword i of lane l at byte 16*l + 4*i; NUM_RECORDS 40 keeps dwords 0-9 only
    run_program(wave, instructions(program), memory, Lds.of_size(0))
    lane = np.arange(32)
    assert wave.vgpr[1].tolist() == np.where(lane < 10, 100 + lane, 0).tolist()
    for i in range(4):  # dword i of lane l is at byte 4*l + 4 + 4*i: each checked on its own
        assert wave.vgpr[2 + i].tolist() == np.where(lane + 1 + i < 10, 101 + lane + i, 0).tolist()
    stored = memory.contents(at).view(np.uint32)
    assert stored[:10].tolist() == [7] * 10 and stored[10:].tolist() == list(range(110, 164))
    wave = wave_with(descriptor_sgprs(at, 40), {0: (np.arange(32) * 16).astype(np.uint32),
                                                **{r: np.full(32, 50 + r, np.uint32) for r in range(2, 6)}})
    run_program(wave, instructions("buffer_store_b128 v[2:5], v0, s[4:7], 0 offen\ns_endpgm"), memory, Lds.of_size(0))
    assert memory.contents(at).view(np.uint32)[:12].tolist() == [52, 53, 54, 55] * 2 + [52, 53, 110, 111]
    # a descriptor that claims more than the buffer holds: the access past the real end is a bounds error
    wave = wave_with(descriptor_sgprs(at, 4096), {0: np.full(32, 256, np.uint32)})
    with pytest.raises(BoundsError, match="buffer_load_b32"):
        run_program(wave, instructions("buffer_load_b32 v1, v0, s[4:7], 0 offen\ns_endpgm"), memory, Lds.of_size(0))


def test_sixteen_bit_buffer_access_and_a_strided_buffer_is_refused() -> None:
    memory = Memory()
    at = memory.allocate("buf", np.arange(64, dtype=np.uint16).tobytes())
    wave = wave_with(descriptor_sgprs(at, 128), {0: (np.arange(32) * 2).astype(np.uint32), 1: 0xABCD1234})
    program = "buffer_load_u16 v2, v0, s[4:7], 0 offen\nbuffer_store_b16 v1, v0, s[4:7], 0 offen offset:64\ns_endpgm"
    run_program(wave, instructions(program), memory, Lds.of_size(0))
    assert wave.vgpr[2].tolist() == list(range(32))
    assert memory.contents(at).view(np.uint16)[32:].tolist() == [0x1234] * 32
    strided = descriptor_sgprs(at, 128)
    strided[5] |= 16 << 16
    structured = {**descriptor_sgprs(at, 128), 7: RAW_BUFFER_WORD3 & ~(3 << 28)}  # OOB_SELECT 0
    with pytest.raises(Unsupported, match="OOB_SELECT 0"):
        run_program(wave_with(structured), instructions("buffer_load_b32 v1, v0, s[4:7], 0 offen\ns_endpgm"),
                    memory, Lds.of_size(0))
    with pytest.raises(Unsupported, match="not raw"):
        run_program(wave_with(strided), instructions("buffer_load_b32 v1, v0, s[4:7], 0 offen\ns_endpgm"),
                    memory, Lds.of_size(0))


def test_global_store_and_its_bounds() -> None:
    memory = Memory()
    at = memory.allocate("out", bytes(128))
    wave = wave_with({2: at & 0xFFFFFFFF, 3: at >> 32}, {0: (np.arange(32) * 4).astype(np.uint32),
                                                          1: np.arange(32, dtype=np.uint32) + 5})
    run_program(wave, instructions("global_store_b32 v0, v1, s[2:3]\ns_endpgm"), memory, Lds.of_size(0))
    assert memory.contents(at).view(np.uint32).tolist() == list(range(5, 37))
    with pytest.raises(BoundsError, match="global_store_b32"):
        run_program(wave_with({2: at & 0xFFFFFFFF, 3: at >> 32}, {0: (np.arange(32) * 4).astype(np.uint32)}),
                    instructions("global_store_b32 v0, v1, s[2:3] offset:4\ns_endpgm"), memory, Lds.of_size(0))


def test_guard_bytes_take_a_stray_write_and_name_the_buffer() -> None:
    memory = Memory()
    out = memory.allocate("out", bytes(128), guard=32)
    other = memory.allocate("other", bytes(64), guard=32)
    assert out % 16 == 0 and not memory.damaged_guards()
    lanes = (np.arange(32) * 4).astype(np.uint32)
    # lane 31 stores 4 bytes past the end of "out": inside its trailing guard, so the run goes on
    run_program(wave_with({2: out & 0xFFFFFFFF, 3: out >> 32}, {0: lanes, 1: np.arange(32, dtype=np.uint32)}),
                instructions("global_store_b32 v0, v1, s[2:3] offset:4\ns_endpgm"), memory, Lds.of_size(0))
    assert memory.damaged_guards() == ["out"]
    assert memory.contents(out).view(np.uint32).tolist() == [0] + list(range(31))
    # a load from the leading guard of "other" reads the pattern (NaN as f32), past it is a bounds error
    wave = wave_with({2: (other - 32) & 0xFFFFFFFF, 3: other >> 32})
    run_program(wave, instructions("s_load_b32 s8, s[2:3], 0x0\ns_endpgm"), memory, Lds.of_size(0))
    assert np.isnan(np.array([wave.sgpr[8]], dtype=np.uint32).view(np.float32)[0])
    wave = wave_with({2: (other - 36) & 0xFFFFFFFF, 3: other >> 32})
    with pytest.raises(BoundsError, match="s_load_b32"):
        run_program(wave, instructions("s_load_b32 s8, s[2:3], 0x0\ns_endpgm"), memory, Lds.of_size(0))
    assert memory.damaged_guards() == ["out"]  # reads leave guards as they are

def test_lds_loads_and_stores() -> None:
    lds = Lds.of_size(512)
    wave = wave_with({}, {0: (np.arange(32) * 4).astype(np.uint32), 1: np.arange(32, dtype=np.uint32) + 1000})
    program = "ds_store_b32 v0, v1\nds_store_b32 v0, v1 offset:128\nds_load_b32 v2, v0 offset:4\n" \
              "ds_load_2addr_b32 v[3:4], v0 offset0:1 offset1:33\nds_load_b64 v[5:6], v0\n" \
              "ds_load_b128 v[7:10], v0 offset:16\ns_endpgm"
    run_program(wave, instructions(program), Memory(), lds)
    table = np.concatenate([np.arange(1000, 1032), np.arange(1000, 1032), np.zeros(64)]).astype(np.uint32)
    lane = np.arange(32)
    assert wave.vgpr[2].tolist() == table[lane + 1].tolist()
    assert (wave.vgpr[3].tolist(), wave.vgpr[4].tolist()) == (table[lane + 1].tolist(), table[lane + 33].tolist())
    assert (wave.vgpr[5].tolist(), wave.vgpr[6].tolist()) == (table[lane].tolist(), table[lane + 1].tolist())
    for i in range(4):
        assert wave.vgpr[7 + i].tolist() == table[lane + 4 + i].tolist()
    with pytest.raises(BoundsError, match="outside the 512 bytes"):
        run_program(wave_with({}, {0: np.full(32, 510, np.uint32)}), instructions("ds_load_b32 v1, v0\ns_endpgm"),
                    Memory(), lds)


def _kernel(source: str, lds_bytes: int, size: int) -> tuple[Program, Kernel]:
    """A hand-made descriptor: kernarg pointer in s[0:1], workgroup id x in s2, 16 VGPRs, wave32, the
    kernels' float mode (round to nearest even, denormals kept, IEEE)."""
    rsrc1 = 1 | 0xF << 16 | 1 << 23
    rsrc2 = 2 << 1 | 1 << 7
    properties = 1 << 3 | 1 << 10
    descriptor = Descriptor(lds_bytes, 0, 16, 0, rsrc1, rsrc2, 0, properties)
    kernel = Kernel("k", 0, descriptor, (), (size, 1, 1), 32)
    return Program("amdgcn-amd-amdhsa--gfx1100", assemble(source), 0, {"k": kernel}), kernel


BARRIER_KERNEL = """s_load_b64 s[4:5], s[0:1], 0x0
v_lshlrev_b32 v1, 2, v0
ds_store_b32 v1, v0
s_waitcnt lgkmcnt(0)
s_barrier
ds_load_b32 v2, v1 offset:128
s_waitcnt lgkmcnt(0)
global_store_b32 v1, v2, s[4:5]
s_endpgm"""  # lane i of wave 0 reads what lane i of wave 1 stored before the barrier


def test_waves_of_a_workgroup_meet_at_the_barrier() -> None:
    program, kernel = _kernel(BARRIER_KERNEL, 512, 64)
    memory, out = launch_with_output(program, kernel, decoder, (1, 1, 1), (64, 1, 1), 4 * 64)
    assert memory.contents(out).view(np.uint32).tolist() == list(range(32, 64)) + [0] * 32


def test_workgroup_ids_and_a_partial_last_wave() -> None:
    source = "s_load_b64 s[4:5], s[0:1], 0x0\nv_lshlrev_b32 v1, 2, v0\nv_mov_b32 v2, s2\ns_waitcnt lgkmcnt(0)\n" \
             "s_mul_i32 s6, s2, 0xc0\ns_add_u32 s4, s4, s6\ns_addc_u32 s5, s5, 0\nglobal_store_b32 v1, v2, s[4:5]\n" \
             "s_endpgm"
    program, kernel = _kernel(source, 0, 40)  # 40 work-items: the second wave has 8 lanes
    memory, out = launch_with_output(program, kernel, decoder, (3, 1, 1), (40, 1, 1), 4 * 48 * 3)
    got = memory.contents(out).view(np.uint32).reshape(3, 48)
    assert got[:, :40].tolist() == [[g] * 40 for g in range(3)] and not got[:, 40:].any()


def test_sizes_past_the_hardware_are_refused_before_anything_is_allocated() -> None:
    program, kernel = _kernel("s_endpgm", 1 << 30, 64)  # a descriptor asking for 1 GiB of LDS
    with pytest.raises(Unsupported, match="bytes of LDS"):
        Runner(program, kernel, decoder)
    program, kernel = _kernel("s_endpgm", 0, 64)
    with pytest.raises(Unsupported, match="a workgroup of 4096 work-items"):
        Runner(program, kernel, decoder).run(Launch(kernel, (1, 1, 1), (4096, 1, 1), 0), Memory())
