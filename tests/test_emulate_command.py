"""`farm emulate`: the built RMSNorm objects for gfx11-generic run on the RDNA3 model within tolerance, other
objects are refused, and the check fails on a kernel whose math is wrong and on an object whose bytes are."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest
from conftest import built_copy, run_farm
from gfx11_asm import assembler

from amdgpu_models.isa import gfx11
from farm.emulate.launch import load

pytestmark = pytest.mark.slow

LAST_LINE = re.compile(r"^emulated=(\d+) within=(\d+) outside=(\d+) max_err=(\S+)$")
FORWARD = "rmsnorm/gfx11-generic/"


def _last(stdout: str) -> tuple[int, int, int, float]:
    match = LAST_LINE.match(stdout.strip().splitlines()[-1])
    assert match, stdout
    return int(match[1]), int(match[2]), int(match[3]), float(match[4])


def test_built_forward_objects_are_within_tolerance(built: Path) -> None:
    proc = run_farm(built, "emulate", "ops=[rmsnorm]", "targets=[gfx11-generic,gfx942]")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    emulated, within, outside, max_err = _last(proc.stdout)
    assert (emulated, within, outside) == (6, 6, 0)  # the small table's six gfx11-generic rows
    assert 0 < max_err < 2.0**-6
    refused = [line for line in proc.stdout.splitlines() if line.startswith("REFUSED ")]
    assert len(refused) == 6 and all("rmsnorm/gfx942/" in line and "gfx11-generic" in line for line in refused)
    report = json.loads((built / ".farm" / "reports" / "latest-emulate.json").read_text())
    assert report["emulated"] == 6 and len(report["refused"]) == 6
    cases = [c for o in report["objects"] for c in o["cases"]]
    assert {c["m"] for c in cases} >= {1, 2, 3} and {c["n"] for c in cases} >= {1, 999, 1024, 2560, 16384}
    train = [o for o in report["objects"] if "_train_" in o["key"]]
    assert train and all("inv_rms" in {m["output"] for m in c["measures"]} for o in train for c in o["cases"])


def test_only_refused_objects_is_not_a_pass(built: Path) -> None:
    proc = run_farm(built, "emulate", "ops=[rmsnorm]", "targets=[gfx942]")
    assert proc.returncode == 1
    assert _last(proc.stdout)[:3] == (0, 0, 0)


def test_backward_objects_run_both_kernels(small_project: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    name = "rmsnorm_bwd_f32_generic1024"
    selection = ("ops=[rmsnorm_bwd]", "targets=[gfx11-generic]", f"names=[{name}]", f"outputs_dir={out}")
    run_farm(small_project, "build", *selection, check=True)
    proc = run_farm(small_project, "emulate", *selection, f"report_dir={tmp_path / 'reports'}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _last(proc.stdout)[:3] == (1, 1, 0)
    assert re.search(rf"^within rmsnorm_bwd/gfx11-generic/{name}: dx \S+ \(tolerance \S+\), dgamma ", proc.stdout,
                     re.M), proc.stdout


def test_a_kernel_whose_mean_forgets_1_over_n_is_outside(built: Path, tmp_path: Path) -> None:
    project = built_copy(built, tmp_path / "p")
    source = project / "kernels_src" / "rmsnorm" / "rmsnorm_fwd.py"
    text = source.read_text()
    assert "rsqrt(sumsq * inv_n + eps)" in text
    source.write_text(text.replace("rsqrt(sumsq * inv_n + eps)", "rsqrt(sumsq + eps)"))
    selection = ("ops=[rmsnorm]", "targets=[gfx11-generic]", "names=[rmsnorm_f32_infer_generic]")
    run_farm(project, "build", *selection, check=True)
    proc = run_farm(project, "emulate", *selection)
    assert proc.returncode == 1, proc.stdout
    assert _last(proc.stdout)[:3] == (1, 0, 1)
    assert re.search(r"^OUTSIDE rmsnorm/gfx11-generic/rmsnorm_f32_infer_generic: y ", proc.stdout, re.M)


def _patch_first(path: Path, name: str, word: int | None = None, opcode: int | None = None) -> int:
    """Rewrites the first `name` instruction of the object's code: its first dword set to `word`, or its VOP1
    opcode field to `opcode`. Returns the instruction's address."""
    data = bytearray(path.read_bytes())
    program = load(bytes(data))
    target = next(i for i in gfx11.decode(program.text, program.text_address, assembler()) if i.name == name)
    text_offset = bytes(data).index(program.text)  # where .text's bytes sit in the file
    at = text_offset + target.address - program.text_address
    first = struct.unpack_from("<I", data, at)[0]
    new = word if word is not None else (first & ~(0xFF << 9)) | (opcode or 0) << 9
    struct.pack_into("<I", data, at, new)
    path.write_bytes(bytes(data))
    return target.address


def test_corrupted_instructions_stop_the_run_or_are_outside(built: Path, tmp_path: Path) -> None:
    project = built_copy(built, tmp_path / "p")
    directory = project / "outputs" / "rmsnorm" / "gfx11-generic"
    # v_sqrt_f32 turned into v_mov_b32 (VOP1 opcode 1): the code still runs, the statistics are wrong
    _patch_first(directory / "rmsnorm_f32_infer_generic.hsaco", "v_sqrt_f32", opcode=1)
    # a v_mul_f32's first dword replaced by a word no encoding the model knows
    address = _patch_first(directory / "rmsnorm_bf16_infer_generic.hsaco", "v_mul_f32", word=0xFFFFFFFF)
    proc = run_farm(project, "emulate", "ops=[rmsnorm]", "targets=[gfx11-generic]",
                    "names=[rmsnorm_f32_infer_generic,rmsnorm_bf16_infer_generic]")
    assert proc.returncode == 1
    assert _last(proc.stdout)[:3] == (2, 0, 2)
    assert re.search(r"^OUTSIDE rmsnorm/gfx11-generic/rmsnorm_f32_infer_generic: y ", proc.stdout, re.M), proc.stdout
    stopped = re.search(r"^OUTSIDE rmsnorm/gfx11-generic/rmsnorm_bf16_infer_generic: stopped: (.*)$", proc.stdout,
                        re.M)
    assert stopped and f"{address:#x}" in stopped[1], proc.stdout
