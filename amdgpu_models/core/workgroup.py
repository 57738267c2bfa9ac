"""A launch: every workgroup of a grid, each a set of waves (wave32 on RDNA, wave64 on CDNA, as the descriptor
says) sharing LDS and meeting at s_barrier, set up from the kernel's own descriptor (user and system SGPRs,
work-item ids, VGPR count, LDS size, float mode).

Waves of a workgroup run in turn, each until it reaches s_barrier or s_endpgm; when every wave still
running waits at the barrier, all go on. Workgroups run one after another. The model has no timing: what
it checks is what a kernel computes, not how fast or in which interleaving of independent waves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from amdgpu_models.core.instruction import Instruction
from amdgpu_models.core.kernel import Kernel, Program
from amdgpu_models.core.memory import Lds, Memory
from amdgpu_models.core.scalar_ops import BARRIER_WORKGROUP
from amdgpu_models.core.step import step
from amdgpu_models.core.wave import EXEC_LO, TTMP_FIRST, Unsupported, Wave

MAX_STEPS = 5_000_000  # per workgroup: a kernel that never ends is an error, not a hang
MAX_KERNARG_BYTES = 4096
MAX_WORKGROUP = 1024  # work-items per workgroup
BARRIERS = frozenset({"s_barrier", "s_barrier_wait"})  # where a wave stops until the others arrive
TTMP7, TTMP9 = TTMP_FIRST + 7, TTMP_FIRST + 9  # GFX12's architected workgroup ids: y | z << 16, and x


@dataclass(frozen=True)
class Launch:
    kernel: Kernel
    grid: tuple[int, int, int]  # workgroups per axis
    workgroup: tuple[int, int, int]  # work-items per axis
    kernarg_address: int


# An ISA's decoder: (code, its address) -> the model's instructions (amdgpu_models.isa.<target>.decode with
# LLVM's tools bound).
Decoder = Callable[[bytes, int], list[Instruction]]


class Runner:
    """One kernel's decoded code, reused by every workgroup of a launch."""

    def __init__(self, program: Program, kernel: Kernel, decoder: Decoder) -> None:
        _check_supported(kernel, program)
        self.kernel = kernel
        self.lanes = 32 if kernel.descriptor.wave32 else 64
        self.vgprs = (kernel.descriptor.vgpr_blocks + 1) * program.vgpr_granule(self.lanes == 32)
        self.agprs = 0
        if program.unified_registers:  # the file's registers from ACCUM_OFFSET on are the AGPRs
            self.vgprs, self.agprs = min(self.vgprs, kernel.descriptor.accum_offset), \
                max(self.vgprs - kernel.descriptor.accum_offset, 0)
        self.architected_ids = program.architected_workgroup_ids
        start = kernel.entry - program.text_address
        code = program.text[start:]
        self.code = {inst.address: (inst, inst.fields) for inst in decoder(code, kernel.entry)}

    def run(self, launch: Launch, memory: Memory) -> None:
        gx, gy, gz = launch.grid
        for z in range(gz):
            for y in range(gy):
                for x in range(gx):
                    self.run_workgroup(launch, memory, (x, y, z))

    def run_workgroup(self, launch: Launch, memory: Memory, group: tuple[int, int, int]) -> None:
        d = self.kernel.descriptor
        lds = Lds.of_size(d.group_segment_bytes)
        size = launch.workgroup[0] * launch.workgroup[1] * launch.workgroup[2]
        if launch.workgroup[1:] != (1, 1):
            raise Unsupported("only one-dimensional workgroups are modelled")
        if not 0 < size <= MAX_WORKGROUP:
            raise Unsupported(f"a workgroup of {size} work-items (at most {MAX_WORKGROUP})")
        waves = [self._new_wave(launch, group, first, size) for first in range(0, size, self.lanes)]
        steps = 0
        while True:
            running = [w for w in waves if not w.done]
            if not running:
                return
            for wave in running:
                steps += self._until_barrier(wave, memory, lds)
                if steps > MAX_STEPS:
                    raise Unsupported(f"workgroup {group} ran {MAX_STEPS} instructions without ending")
            waiting = [w for w in waves if not w.done]
            if waiting and not all(w.at_barrier for w in waiting):
                raise Unsupported("a wave stopped without reaching a barrier or s_endpgm")
            for wave in waiting:
                wave.at_barrier = False

    def _new_wave(self, launch: Launch, group: tuple[int, int, int], first: int, size: int) -> Wave:
        d = self.kernel.descriptor
        wave = Wave(vgprs=self.vgprs, lanes=self.lanes, agprs=self.agprs)
        for name, at in d.user_sgprs():
            if name == "private_segment_buffer":  # no scratch (refused): a resource of 0 records, all zeros
                continue
            if name != "kernarg_segment_ptr":
                raise Unsupported(f"user SGPR {name} is not modelled")
            wave.sgpr[at] = launch.kernarg_address & 0xFFFFFFFF
            wave.sgpr[at + 1] = launch.kernarg_address >> 32
        if self.architected_ids:  # the descriptor's enable bits still say which ids the kernel uses
            wave.sgpr[TTMP9] = group[0]
            wave.sgpr[TTMP7] = group[1] & 0xFFFF | (group[2] & 0xFFFF) << 16
            wave.trap_registers = frozenset({TTMP7, TTMP9})
        else:
            for axis, sgpr in d.workgroup_id_sgprs.items():
                wave.sgpr[sgpr] = group["xyz".index(axis)]
        local = first + np.arange(self.lanes)
        wave.vgpr[0] = np.where(local < size, local, 0).astype(np.uint32)  # x only: y and z are 0
        wave.write_mask(EXEC_LO, Wave.bits_of(local < size))
        wave.pc = self.kernel.entry
        return wave

    def _until_barrier(self, wave: Wave, memory: Memory, lds: Lds) -> int:
        steps = 0
        at = self.code.get  # the loop runs once per instruction: its lookups are bound once
        while not wave.done:
            found = at(wave.pc)
            if found is None:
                raise Unsupported(f"the program counter {wave.pc:#x} is not at an instruction")
            inst, f = found
            steps += 1
            name = inst.name
            if name in BARRIERS:
                if name == "s_barrier_wait":  # RDNA4: the wave has signalled (s_barrier_signal) before
                    if f.imm != BARRIER_WORKGROUP or not wave.barrier_signalled:
                        raise Unsupported(f"s_barrier_wait {f.imm:#x} at {inst.address:#x} without this wave's "
                                          "s_barrier_signal -1 (only the workgroup barrier is modelled)")
                    wave.barrier_signalled = False
                wave.pc += inst.size
                wave.at_barrier = True
                return steps
            step(wave, inst, f, memory, lds)
            if steps > MAX_STEPS:
                return steps
        return steps


def _check_supported(kernel: Kernel, program: Program) -> None:
    """The descriptor settings the model implements; anything else stops before the first instruction."""
    d = kernel.descriptor
    generation = program.generation
    lanes = 32 if d.wave32 else 64
    if kernel.wavefront_size != lanes:
        raise Unsupported(f"{kernel.name}: the metadata's wavefront size {kernel.wavefront_size} is not the "
                          f"descriptor's (wave{lanes})")
    if generation >= 10 and lanes != 32:
        raise Unsupported(f"{kernel.name}: RDNA wave64 launches are not modelled (wave32 only on GFX10+)")
    if generation < 10:  # GFX9: the descriptor's float fields that RDNA's tables do not read
        if not d.dx10_clamp:
            raise Unsupported(f"{kernel.name}: DX10_CLAMP off is not modelled (a clamped NaN would stay NaN; the "
                              "model's clamp, where it has one, is DX10's: NaN to 0)")
        if d.fp16_overflow:
            raise Unsupported(f"{kernel.name}: FP16_OVFL (16-bit overflow clamped to the largest finite value) is "
                              "not modelled")
    if d.scratch_enabled or d.private_segment_bytes:
        raise Unsupported(f"{kernel.name}: scratch memory is not modelled")
    if (d.round_mode_32, d.round_mode_16_64, d.denorm_mode_32, d.denorm_mode_16_64) != (0, 0, 3, 3):
        raise Unsupported(f"{kernel.name}: the float mode (round {d.round_mode_32}/{d.round_mode_16_64}, denormals "
                          f"{d.denorm_mode_32}/{d.denorm_mode_16_64}) is not the one modelled (nearest even, "
                          "denormals kept)")
    if generation < 12 and not d.ieee_mode:  # GFX12 has no IEEE mode bit
        raise Unsupported(f"{kernel.name}: only IEEE mode is modelled")
    # The object is data: sizes past what the hardware allows are refused before anything is allocated.
    if d.group_segment_bytes > program.max_lds_bytes:
        raise Unsupported(f"{kernel.name}: {d.group_segment_bytes} bytes of LDS ({program.processor} has "
                          f"{program.max_lds_bytes} per workgroup)")
    if d.kernarg_bytes > MAX_KERNARG_BYTES:
        raise Unsupported(f"{kernel.name}: {d.kernarg_bytes} bytes of kernel arguments (the model takes at most "
                          f"{MAX_KERNARG_BYTES})")
    size = kernel.workgroup_size
    if size is not None and not all(0 < n <= MAX_WORKGROUP for n in size):
        raise Unsupported(f"{kernel.name}: workgroup size {size} (each dimension 1..{MAX_WORKGROUP})")
