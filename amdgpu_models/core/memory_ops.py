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
"""

from __future__ import annotations

import numpy as np

from amdgpu_models.core.instruction import Fields, Instruction
from amdgpu_models.core.memory import Lds, Memory
from amdgpu_models.core.wave import NULL, Unsupported, Wave

SMEM_DWORDS = {"s_load_b32": 1, "s_load_b64": 2, "s_load_b96": 3, "s_load_b128": 4, "s_load_b256": 8, "s_load_b512": 16}
CACHE_CONTROL = ("buffer_gl0_inv", "global_inv")  # invalidates: the model has no caches
BUFFER = {"buffer_load_u16": ("load", 2, 1), "buffer_load_b32": ("load", 4, 1),
          "buffer_load_b64": ("load", 4, 2), "buffer_load_b128": ("load", 4, 4),
          "buffer_store_b16": ("store", 2, 1), "buffer_store_b64": ("store", 4, 2),
          "buffer_store_b32": ("store", 4, 1), "buffer_store_b128": ("store", 4, 4)}
RAW_OOB_SELECT = 3
UNCHECKED_OOB_SELECT = 2
DS_LOADS = {"ds_load_b32": 1, "ds_load_b64": 2, "ds_load_b128": 4}  # dwords from one address
DS_STORES = {"ds_store_b32": 1, "ds_store_b64": 2, "ds_store_b128": 4}
DS_STORE_2ADDR = {"ds_store_2addr_b32": 1, "ds_store_2addr_b64": 2}  # dwords at each of two addresses
DS_STORE_16 = ("ds_store_b16", "ds_store_b16_d16_hi")  # the data VGPR's low or high 16 bits
DS = ("ds_load_2addr_b32", *DS_LOADS, *DS_STORES, *DS_STORE_2ADDR, *DS_STORE_16)
MNEMONICS = frozenset({*SMEM_DWORDS, *BUFFER, *DS, *CACHE_CONTROL, "global_store_b32"})


def run_memory(wave: Wave, inst: Instruction, f: Fields, memory: Memory, lds: Lds) -> None:
    name = inst.name
    if name in SMEM_DWORDS:
        _smem(wave, inst, f, memory, SMEM_DWORDS[name])
    elif name in CACHE_CONTROL:
        return
    elif name in BUFFER:
        _buffer(wave, inst, f, memory, *BUFFER[name])
    elif name == "global_store_b32":
        _global_store(wave, inst, f, memory)
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
    if f.idxen or stride or add_tid or oob_select not in (RAW_OOB_SELECT, UNCHECKED_OOB_SELECT):
        raise Unsupported(f"{_where(inst)}: a buffer that is not raw (stride {stride}, idxen {f.idxen}, "
                          f"add_tid {add_tid}, OOB_SELECT {oob_select})")
    soffset = wave.scalar(f.soffset, None)
    bound = max(records - soffset, 0)  # RDNA's raw range check: offset + size <= NUM_RECORDS - soffset
    offset = np.full(wave.lanes, f.imm, dtype=np.int64)
    if f.offen:
        offset += wave.vgpr[f.addr].astype(np.int64)
    active = wave.exec_mask
    for i in range(dwords):
        at = offset + 4 * i
        inside = active & (at + size <= bound) if oob_select == RAW_OOB_SELECT else active & (records != 0)
        if kind == "load":
            values = memory.gather(base + soffset + at, size, inside, _where(inst))  # 0 out of range
            wave.write_vgpr(f.dst + i, values, active)
        else:
            memory.scatter(base + soffset + at, wave.lane_register(f.data[0] + i), size, inside, _where(inst))


def _global_store(wave: Wave, inst: Instruction, f: Fields, memory: Memory) -> None:
    if f.base == NULL:  # no scalar base: the address is a VGPR pair
        address = wave.vgpr[f.addr].astype(np.int64) | wave.vgpr[f.addr + 1].astype(np.int64) << 32
    else:
        address = wave.scalar64(f.base, None) + wave.vgpr[f.addr].astype(np.int64)
    memory.scatter(address + f.imm, wave.lane_register(f.data[0]), 4, wave.exec_mask, _where(inst))


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
    elif name == "ds_load_2addr_b32":  # two dwords at offset0*4 and offset1*4
        for i, each in enumerate(f.offsets):
            wave.write_vgpr(f.dst + i, lds.load(base + 4 * each, active), active)
    elif name in DS_LOADS:
        for i in range(DS_LOADS[name]):
            wave.write_vgpr(f.dst + i, lds.load(base + offset + 4 * i, active), active)
    else:
        raise Unsupported(f"{_where(inst)} is not implemented")

