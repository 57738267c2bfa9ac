"""How a code object says its kernels are launched: the facts an instruction-level model needs before it runs
one instruction, all read from the object itself (never assumed about the kernel). The caller reads the ELF
file (sections, symbols, the metadata note) and hands the plain values over: this package parses no ELF.

- the code: the `.text` section's bytes and address, and each kernel's entry address (its descriptor's
  address plus the descriptor's KERNEL_CODE_ENTRY_BYTE_OFFSET);
- the kernel descriptor (64 bytes in `.rodata` at the `<kernel>.kd` symbol): LDS and kernarg sizes, the
  SGPRs the hardware initialises (user SGPRs from kernel_code_properties, then the workgroup ids from
  COMPUTE_PGM_RSRC2), the VGPR work-item ids, wave32, and the float modes (round, denormals) from
  COMPUTE_PGM_RSRC1;
- the metadata note: the kernel arguments (offset, size, kind) and the required workgroup size.

The layout is the one the LLVM AMDGPU backend documents for code object v4 and later ("Kernel Descriptor",
"Initial Kernel Execution State").
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

DESCRIPTOR_BYTES = 64


class NotLaunchable(ValueError):
    """The object does not describe a kernel the model can set up (named in the message)."""


@dataclass(frozen=True)
class Argument:
    """One kernel argument from the metadata note (`.args`)."""

    name: str
    offset: int
    size: int
    kind: str  # .value_kind: global_buffer, by_value, ...


@dataclass(frozen=True)
class Descriptor:
    """The fields of a kernel descriptor that decide a wave's initial state."""

    group_segment_bytes: int  # LDS the kernel uses (static)
    private_segment_bytes: int  # scratch per work-item
    kernarg_bytes: int
    entry_offset: int  # from the descriptor's own address to the first instruction
    rsrc1: int
    rsrc2: int
    rsrc3: int
    code_properties: int

    # kernel_code_properties: which user SGPRs the hardware sets up, in this order.
    USER_SGPRS = (("private_segment_buffer", 0, 4), ("dispatch_ptr", 1, 2), ("queue_ptr", 2, 2),
                  ("kernarg_segment_ptr", 3, 2), ("dispatch_id", 4, 2), ("flat_scratch_init", 5, 2),
                  ("private_segment_size", 6, 1))

    @classmethod
    def parse(cls, raw: bytes) -> Descriptor:
        if len(raw) != DESCRIPTOR_BYTES:
            raise NotLaunchable(f"a kernel descriptor is {DESCRIPTOR_BYTES} bytes, this one {len(raw)}")
        group, private, kernarg = struct.unpack_from("<III", raw, 0)
        (entry,) = struct.unpack_from("<q", raw, 16)
        rsrc3, rsrc1, rsrc2 = struct.unpack_from("<III", raw, 44)
        (properties,) = struct.unpack_from("<H", raw, 56)
        return cls(group, private, kernarg, entry, rsrc1, rsrc2, rsrc3, properties)

    def user_sgprs(self) -> list[tuple[str, int]]:
        """(name, first SGPR) of each enabled user SGPR value, packed from s0 up."""
        placed, at = [], 0
        for name, bit, count in self.USER_SGPRS:
            if self.code_properties >> bit & 1:
                placed.append((name, at))
                at += count
        return placed

    @property
    def user_sgpr_count(self) -> int:
        """COMPUTE_PGM_RSRC2.USER_SGPR_COUNT: where the system SGPRs (workgroup ids) start. It can exceed what
        the enabled user values fill (the backend reserves SGPRs for preloading), so it is read, not derived."""
        return self.rsrc2 >> 1 & 0x1F

    @property
    def workgroup_id_sgprs(self) -> dict[str, int]:
        """The SGPR of each enabled workgroup id (x, y, z), after the user SGPRs."""
        found, at = {}, self.user_sgpr_count
        for axis, bit in (("x", 7), ("y", 8), ("z", 9)):
            if self.rsrc2 >> bit & 1:
                found[axis] = at
                at += 1
        return found

    @property
    def workitem_id_vgprs(self) -> int:
        """COMPUTE_PGM_RSRC2.ENABLE_VGPR_WORKITEM_ID: 0 (x only), 1 (x, y), 2 (x, y, z)."""
        return self.rsrc2 >> 11 & 0x3

    @property
    def scratch_enabled(self) -> bool:
        return bool(self.rsrc2 & 1)

    @property
    def wave32(self) -> bool:
        return bool(self.code_properties >> 10 & 1)

    @property
    def round_mode_32(self) -> int:
        """COMPUTE_PGM_RSRC1.FLOAT_ROUND_MODE_32: 0 is round to nearest even."""
        return self.rsrc1 >> 12 & 0x3

    @property
    def round_mode_16_64(self) -> int:
        return self.rsrc1 >> 14 & 0x3

    @property
    def denorm_mode_32(self) -> int:
        """COMPUTE_PGM_RSRC1.FLOAT_DENORM_MODE_32: 3 keeps input and output denormals, 0 flushes both."""
        return self.rsrc1 >> 16 & 0x3

    @property
    def denorm_mode_16_64(self) -> int:
        return self.rsrc1 >> 18 & 0x3

    @property
    def ieee_mode(self) -> bool:
        """COMPUTE_PGM_RSRC1.IEEE_MODE (GFX6-GFX11; GFX12 has no such mode bit: the bit is reserved, 0)."""
        return bool(self.rsrc1 >> 23 & 1)

    @property
    def dx10_clamp(self) -> bool:
        """COMPUTE_PGM_RSRC1.DX10_CLAMP (GFX6-GFX11): clamping a NaN gives 0."""
        return bool(self.rsrc1 >> 21 & 1)

    @property
    def fp16_overflow(self) -> bool:
        """COMPUTE_PGM_RSRC1.FP16_OVFL (GFX9 and later): 16-bit float overflow clamps to the largest finite value."""
        return bool(self.rsrc1 >> 26 & 1)

    @property
    def vgpr_blocks(self) -> int:
        """COMPUTE_PGM_RSRC1.GRANULATED_WORKITEM_VGPR_COUNT: VGPR blocks minus one (the block size is the
        target's and the wave width's: Program.vgpr_granule)."""
        return self.rsrc1 & 0x3F

    @property
    def accum_offset(self) -> int:
        """COMPUTE_PGM_RSRC3.ACCUM_OFFSET (gfx90a, gfx942, gfx950; LLVM AMDGPUUsage): the first AGPR's place in
        the unified register file, in VGPRs (granule 4: the field's 0..63 is 4..256)."""
        return ((self.rsrc3 & 0x3F) + 1) * 4


@dataclass(frozen=True)
class Kernel:
    """One kernel of a code object, as a launch needs it."""

    name: str
    entry: int  # address of its first instruction
    descriptor: Descriptor
    arguments: tuple[Argument, ...]
    workgroup_size: tuple[int, int, int] | None  # .reqd_workgroup_size, when the kernel requires one
    wavefront_size: int


@dataclass(frozen=True)
class Program:
    """A code object's instructions and kernels: `text` is loaded at `text_address`."""

    target: str  # amdhsa.target, e.g. amdgcn-amd-amdhsa--gfx11-generic
    text: bytes
    text_address: int
    kernels: dict[str, Kernel]

    @property
    def generation(self) -> int:
        """The GFX major version of the target (11 for gfx1100 or gfx11-generic, 12 for gfx12-generic, 9 for
        gfx942): the launch conventions LLVM documents per generation follow from it."""
        found = re.search(r"gfx(\d+)(?:-\d+)?-generic$|gfx(\d+)[0-9a-f]{2}$", self.target)
        if found is None:
            raise NotLaunchable(f"no GFX processor in the target {self.target!r}")
        return int(found.group(1) or found.group(2))

    @property
    def processor(self) -> str:
        """The processor of amdhsa.target (gfx942 in amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-)."""
        found = re.search(r"(gfx[0-9a-z]+(?:-[0-9a-z]+)*-generic|gfx[0-9a-f]+)(?::|$)", self.target)
        if found is None:
            raise NotLaunchable(f"no GFX processor in the target {self.target!r}")
        return found.group(1)

    @property
    def unified_registers(self) -> bool:
        """gfx90a, gfx942, gfx950: VGPRs and AGPRs share one file, split at the descriptor's ACCUM_OFFSET."""
        return self.processor in ("gfx90a", "gfx942", "gfx950")

    def vgpr_granule(self, wave32: bool) -> int:
        """VGPRs per GRANULATED_WORKITEM_VGPR_COUNT block (LLVM AMDGPUUsage, "compute_pgm_rsrc1"): GFX10+ 8 in
        wave32 and 4 in wave64; gfx90a, gfx942, gfx950 8 (their count covers the unified VGPR and AGPR file);
        the other GFX9 targets 4."""
        if self.generation >= 10:
            return 8 if wave32 else 4
        return 8 if self.processor in ("gfx90a", "gfx942", "gfx950") else 4

    @property
    def max_lds_bytes(self) -> int:
        """LDS one workgroup can allocate: 160 KiB on gfx950, 64 KiB on the other targets modelled."""
        return 163840 if self.processor == "gfx950" else 65536

    @property
    def architected_workgroup_ids(self) -> bool:
        """GFX12 and later (LLVM's FeatureArchitectedSGPRs): the hardware puts the workgroup ids in trap registers,
        x in ttmp9 and y, z in ttmp7's low and high halves, not in system SGPRs after the user SGPRs."""
        return self.generation >= 12

    def code_at(self, address: int, length: int) -> bytes:
        """`length` bytes of code from `address`; outside `.text` is an error naming the address."""
        start = address - self.text_address
        if start < 0 or start + length > len(self.text):
            raise NotLaunchable(f"address {address:#x} is outside .text ({self.text_address:#x}.."
                                f"{self.text_address + len(self.text):#x})")
        return self.text[start:start + length]
