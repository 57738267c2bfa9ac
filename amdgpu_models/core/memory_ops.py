"""Memory instructions (SMEM, MUBUF, FLAT global, DS) on a wave: addresses from the instruction's fields,
values through `Memory` (global buffers with bounds) and `Lds`. Every access completes before the next
instruction, so s_waitcnt has nothing to wait for in this model.

Buffer resource descriptors (four SGPRs): base address, stride and NUM_RECORDS from words 0-2; stride,
index and thread-id addressing must be off, and word 3's OOB_SELECT must be 3 or 2. OOB_SELECT 3 (raw): the
model checks each dword (or the 16 bits of a 16-bit access) on its own against NUM_RECORDS: inside it goes to
memory, past it a load returns 0 and a store is dropped. The scalar offset (soffset) counts: on RDNA a raw
access is out of range when offset + its size > NUM_RECORDS - soffset (the subtraction clamped at 0), offset
being the instruction's offset plus the VGPR offset, as AMD's MLIR/LLVM maintainers describe the hardware
(ROCm/rocMLIR#678, llvm/llvm-project#169230; LLVM's older intrinsic comments say soffset is excluded, which
holds for gfx9 but not, by those accounts, for RDNA). OOB_SELECT 2 (no range check: an access is out of
range only when NUM_RECORDS is 0): every access goes to memory. Either way the address is base + soffset +
offset, and the real bounds of the allocations still hold.

GFX9 (CDNA, `Fields.gfx9_range`, set by the CDNA tables): the descriptor has no OOB_SELECT (word 3's bits 28-29
are reserved) and swizzling (word 1's bit 31) must be off. AMD's CDNA ISA guide ("Range Checking", CDNA4's
9.1.5.1) says a raw buffer (ADD_TID 0, SWIZZLE_EN 0, IDXEN 0) is out of range when
InstOffset + (OFFEN ? vgpr_offset : 0) >= NumRecords, each dword of a dwordx2/x3/x4 access checked on its own:
soffset is not in the check (it is still in the address). docs/emulation.md says where hardware reports differ.
"""

from __future__ import annotations

import numpy as np

from amdgpu_models.core import lanes
from amdgpu_models.core.instruction import Fields, Instruction
from amdgpu_models.core.memory import BoundsError, Lds, Memory
from amdgpu_models.core.wave import NULL, Unsupported, Wave

SMEM_DWORDS = {"s_load_b32": 1, "s_load_b64": 2, "s_load_b96": 3, "s_load_b128": 4, "s_load_b256": 8, "s_load_b512": 16}
CACHE_CONTROL = ("buffer_gl0_inv", "global_inv")  # invalidates: the model has no caches
BUFFER = {"buffer_load_u16": ("load", 2, 1), "buffer_load_b32": ("load", 4, 1),
          "buffer_load_b64": ("load", 4, 2), "buffer_load_b128": ("load", 4, 4),
          "buffer_store_b16": ("store", 2, 1), "buffer_store_b64": ("store", 4, 2),
          "buffer_store_b32": ("store", 4, 1), "buffer_store_b128": ("store", 4, 4)}
RAW_OOB_SELECT = 3
UNCHECKED_OOB_SELECT = 2
DS_LOADS = {"ds_load_b32": 1, "ds_load_b64": 2, "ds_load_b96": 3, "ds_load_b128": 4}  # dwords from one address
DS_STORES = {"ds_store_b32": 1, "ds_store_b64": 2, "ds_store_b128": 4}
DS_STORE_2ADDR = {"ds_store_2addr_b32": 1, "ds_store_2addr_b64": 2}  # dwords at each of two addresses
DS_STORE_16 = ("ds_store_b16", "ds_store_b16_d16_hi")  # the data VGPR's low or high 16 bits
DS_LOAD_2ADDR = {"ds_load_2addr_b32": 1, "ds_load_2addr_stride64_b32": 64}  # offsets in dwords, times this
DS_LOAD_2ADDR_B64 = "ds_load_2addr_b64"  # two dword pairs at offset0*8 and offset1*8
DS = (*DS_LOAD_2ADDR, DS_LOAD_2ADDR_B64, *lanes.DS, *DS_LOADS, *DS_STORES, *DS_STORE_2ADDR, *DS_STORE_16)
GLOBAL = {"global_load_b32": ("load", 1), "global_load_b64": ("load", 2), "global_load_b128": ("load", 4),
          "global_store_b32": ("store", 1), "global_store_b64": ("store", 2), "global_store_b128": ("store", 4)}
MNEMONICS = frozenset({*SMEM_DWORDS, *BUFFER, *DS, *CACHE_CONTROL, *GLOBAL})


def run_memory(wave: Wave, inst: Instruction, f: Fields, memory: Memory, lds: Lds) -> None:
    name = inst.name
    if name in SMEM_DWORDS:
        _smem(wave, inst, f, memory, SMEM_DWORDS[name])
    elif name in CACHE_CONTROL:
        return
    elif name in BUFFER:
        _buffer(wave, inst, f, memory, *BUFFER[name])
    elif name in GLOBAL:
        _global(wave, inst, f, memory, *GLOBAL[name])
    elif name.startswith("ds_"):
        _ds(wave, inst, f, lds)
    else:
        raise Unsupported(f"{name} at {inst.address:#x} is not implemented")


def _where(inst: Instruction) -> str:
    return f"{inst.name} at {inst.address:#x}"


def _smem(wave: Wave, inst: Instruction, f: Fields, memory: Memory, dwords: int) -> None:
    address = wave.scalar64(f.base, None) + f.imm
    if f.soffset != NULL:
        address += wave.scalar(f.soffset, None)
    raw = memory.read(address, 4 * dwords, _where(inst))
    for i in range(dwords):
        wave.write_scalar(f.dst + i, int.from_bytes(raw[4 * i:4 * i + 4], "little"))


def _buffer(wave: Wave, inst: Instruction, f: Fields, memory: Memory, kind: str, size: int, dwords: int,
            ) -> None:
    words = [int(wave.sgpr[f.base + i]) for i in range(4)]
    base = words[0] | (words[1] & 0xFFFF) << 32
    stride, records = words[1] >> 16 & 0x3FFF, words[2]
    oob_select, add_tid = words[3] >> 28 & 0x3, words[3] >> 23 & 1
    if f.gfx9_range:  # GFX9: no OOB_SELECT field; SWIZZLE_EN is word 1's bit 31
        if f.idxen or stride or add_tid or words[1] >> 31:
            raise Unsupported(f"{_where(inst)}: a buffer that is not raw (stride {stride}, idxen {f.idxen}, "
                              f"add_tid {add_tid}, swizzle {words[1] >> 31})")
    elif f.idxen or stride or add_tid or oob_select not in (RAW_OOB_SELECT, UNCHECKED_OOB_SELECT):
        raise Unsupported(f"{_where(inst)}: a buffer that is not raw (stride {stride}, idxen {f.idxen}, "
                          f"add_tid {add_tid}, OOB_SELECT {oob_select})")
    soffset = wave.scalar(f.soffset, None)
    bound = max(records - soffset, 0)  # RDNA's raw range check: offset + size <= NUM_RECORDS - soffset
    offset = np.full(wave.lanes, f.imm, dtype=np.int64)
    if f.offen:
        offset += wave.vgpr[f.addr].astype(np.int64)
    active = wave.exec_mask
    if kind == "load" and dwords > 1 and _load_at_once(wave, f, memory, base + soffset, offset, size, dwords,
                                                       _inside(f, offset, 4 * np.arange(dwords)[:, None], active,
                                                               records, bound, oob_select, size), _where(inst)):
        return
    for i in range(dwords):
        at = offset + 4 * i
        inside = _inside(f, offset, 4 * i, active, records, bound, oob_select, size)
        if kind == "load":
            values = memory.gather(base + soffset + at, size, inside, _where(inst))  # 0 out of range
            wave.write_vgpr(f.dst + i, values, active)
        else:
            memory.scatter(base + soffset + at, wave.lane_register(f.data[0] + i), size, inside, _where(inst))


def _inside(f: Fields, offset: np.ndarray, step: np.ndarray, active: np.ndarray, records: int, bound: int,
            oob_select: int, size: int) -> np.ndarray:
    """Per lane (and per dword when `step`, the dword's byte offset, is a column), whether the access is in range."""
    at = offset + step
    if f.gfx9_range:  # GFX9's raw check: each dword's (or the short's) offset, soffset not counted
        return active & (at < records)
    if oob_select == RAW_OOB_SELECT:
        return active & (at + size <= bound)
    return active & (records != 0) & np.ones(at.shape, dtype=bool)


def _load_at_once(wave: Wave, f: Fields, memory: Memory, start: int, offset: np.ndarray, size: int, dwords: int,
                  inside: np.ndarray, where: str) -> bool:
    """A multi-dword buffer load as one gather of every (dword, lane); False, with nothing written, when that
    gather meets a bounds error (the dword-by-dword loop then writes and fails exactly as it always did)."""
    at = start + offset + 4 * np.arange(dwords)[:, None]
    try:
        values = memory.gather(at.reshape(-1), size, inside.reshape(-1), where).reshape(dwords, -1)
    except BoundsError:
        return False
    active = wave.exec_mask
    for i in range(dwords):
        wave.write_vgpr(f.dst + i, values[i], active)
    return True


def _global(wave: Wave, inst: Instruction, f: Fields, memory: Memory, kind: str, dwords: int) -> None:
    """global_load/store of 1, 2 or 4 dwords: the address is a VGPR pair, or (saddr) an SGPR pair plus a VGPR's
    unsigned 32-bit offset; then the instruction's signed offset."""
    if f.base == NULL:  # no scalar base: the address is a VGPR pair
        address = wave.vgpr[f.addr].astype(np.int64) | wave.vgpr[f.addr + 1].astype(np.int64) << 32
    else:
        address = wave.scalar64(f.base, None) + wave.vgpr[f.addr].astype(np.int64)
    active = wave.exec_mask
    for i in range(dwords):
        at = address + f.imm + 4 * i
        if kind == "load":
            wave.write_vgpr(f.dst + i, memory.gather(at, 4, active, _where(inst)), active)
        else:
            memory.scatter(at, wave.lane_register(f.data[0] + i), 4, active, _where(inst))


def _ds(wave: Wave, inst: Instruction, f: Fields, lds: Lds) -> None:
    active = wave.exec_mask
    base = wave.vgpr[f.addr].astype(np.int64)
    offset = f.offsets[0] | f.offsets[1] << 8
    name = inst.name
    if name in DS_STORES:
        for i in range(DS_STORES[name]):
            lds.store(base + offset + 4 * i, wave.lane_register(f.data[0] + i), active)
    elif name in DS_STORE_2ADDR:  # data0 at offset0 and data1 at offset1, in units of the data's size
        dwords = DS_STORE_2ADDR[name]
        for each, data in zip(f.offsets, f.data, strict=True):
            for i in range(dwords):
                lds.store(base + 4 * dwords * each + 4 * i, wave.lane_register(data + i), active)
    elif name in DS_STORE_16:
        values = wave.lane_register(f.data[0])
        lds.store(base + offset, values >> np.uint32(16) if name.endswith("_d16_hi") else values, active, size=2)
    elif name in DS_LOAD_2ADDR:  # two dwords at offset0*4 and offset1*4 (stride64: times 64)
        scale = 4 * DS_LOAD_2ADDR[name]
        for i, each in enumerate(f.offsets):
            wave.write_vgpr(f.dst + i, lds.load(base + scale * each, active), active)
    elif name == DS_LOAD_2ADDR_B64:
        for i, each in enumerate(f.offsets):
            for j in range(2):
                wave.write_vgpr(f.dst + 2 * i + j, lds.load(base + 8 * each + 4 * j, active), active)
    elif name in lanes.DS:  # lane permutes through the LDS hardware: no LDS access
        lanes.DS[name](wave, inst, f)
    elif name in DS_LOADS:
        for i in range(DS_LOADS[name]):
            wave.write_vgpr(f.dst + i, lds.load(base + offset + 4 * i, active), active)
    else:
        raise Unsupported(f"{_where(inst)} is not implemented")

