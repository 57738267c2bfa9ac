"""The shared core at wave64: programs of plain VALU operations that LLVM's assembler encodes for gfx942 (a
wave64 target) run on 64 lanes, with EXEC and VCC as register pairs. Expected values are worked out here from
the operations' documented behaviour (exact integers in binary32), never from the model. This checks the
core's wave width; the CDNA table's own mnemonics and the wave64 launch are tests/test_emulate_gfx9.py's."""

from __future__ import annotations

import io
import subprocess

import numpy as np
import pytest
from elftools.elf.elffile import ELFFile
from gfx11_asm import assembler

from amdgpu_models.core.memory import Lds, Memory
from amdgpu_models.core.step import run_program
from amdgpu_models.core.wave import Unsupported, Wave
from amdgpu_models.isa import gfx942

LANES = np.arange(64)
VCC_LO, VCC_HI, EXEC_LO, EXEC_HI = 106, 107, 126, 127


def run64(source: str, vgpr: dict[int, np.ndarray], exec_mask: int = (1 << 64) - 1,
          sgpr: dict[int, int] | None = None) -> Wave:
    proc = subprocess.run([str(assembler()), "-arch=amdgcn", "-mcpu=gfx942", "-filetype=obj", "-o", "-"],
                          input=(source + "\ns_endpgm").encode(), capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    code = ELFFile(io.BytesIO(proc.stdout)).get_section_by_name(".text").data()
    wave = Wave(lanes=64)
    wave.sgpr[EXEC_LO], wave.sgpr[EXEC_HI] = exec_mask & 0xFFFFFFFF, exec_mask >> 32
    for reg, value in (sgpr or {}).items():
        wave.sgpr[reg] = value
    for reg, values in vgpr.items():
        wave.vgpr[reg] = values
    run_program(wave, gfx942.decode(code, 0, assembler()), Memory(), Lds.of_size(0))
    return wave


def f32(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def test_a_valu_program_runs_on_64_lanes() -> None:
    wave = run64("v_add_f32 v2, v0, v1\nv_mul_f32_e64 v3, -v0, v1\nv_add_u32 v4, v5, v6\nv_fma_f32 v7, v0, v1, 1.0",
                 {0: f32(LANES), 1: f32(2 * LANES), 5: (0xFFFFFFF0 + LANES).astype(np.uint32),
                  6: np.full(64, 0x20, np.uint32)})
    assert wave.vgpr.shape[1] == 64
    assert wave.vgpr[2].view(np.float32).tolist() == [3.0 * i for i in range(64)]  # i + 2i, exact
    assert wave.vgpr[3].view(np.float32).tolist() == [-(2.0 * i * i) for i in range(64)]
    assert wave.vgpr[4].tolist() == [(0xFFFFFFF0 + i + 0x20) % 2**32 for i in range(64)]  # modulo 2^32
    assert wave.vgpr[7].view(np.float32).tolist() == [2.0 * i * i + 1 for i in range(64)]


def test_exec_is_64_bits() -> None:
    upper_half = ((1 << 32) - 1) << 32
    wave = run64("v_mov_b32 v3, 7", {3: np.zeros(64, np.uint32)}, exec_mask=upper_half | 1)
    assert wave.vgpr[3].tolist() == [7] + [0] * 31 + [7] * 32


def test_vcc_and_compare_masks_are_register_pairs() -> None:
    wave = run64("v_cmp_gt_f32 vcc, v0, v1\nv_cndmask_b32 v2, v0, v1, vcc\n"
                 "v_cmp_lt_f32_e64 s[4:5], v0, v1\nv_cndmask_b32_e64 v3, v0, v1, s[4:5]",
                 {0: f32(LANES), 1: f32(np.full(64, 40.0))})
    above = sum(1 << i for i in range(41, 64))  # lanes whose i > 40
    below = sum(1 << i for i in range(40))
    assert int(wave.sgpr[VCC_LO]) | int(wave.sgpr[VCC_HI]) << 32 == above
    assert int(wave.sgpr[4]) | int(wave.sgpr[5]) << 32 == below
    # v_cndmask: src1 where the mask bit is set, else src0
    assert wave.vgpr[2].view(np.float32).tolist() == [float(i) if i <= 40 else 40.0 for i in range(64)]
    assert wave.vgpr[3].view(np.float32).tolist() == [40.0 if i < 40 else float(i) for i in range(64)]


def test_a_wave_is_32_or_64_lanes() -> None:
    assert Wave().vgpr.shape[1] == 32
    with pytest.raises(Unsupported, match="16 lanes"):
        Wave(lanes=16)
