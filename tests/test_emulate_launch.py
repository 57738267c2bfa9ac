"""farm/emulate/launch.py: a kernel's launch facts read from the object, checked against LLVM's own reading of
the same descriptor (llvm-objdump prints a kernel descriptor as `.amdhsa_*` directives) and the symbol table."""

from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

import pytest
from conftest import REPO

from farm.elf.code_object import read_code_object
from farm.emulate.launch import Descriptor, NotLaunchable, load
from farm.table.config import load as load_config
from farm.toolchain.disasm import binary


def _objdump() -> str:
    return str(binary(load_config(REPO, []).toolchain_pin.get("disassembler")))


def _llvm_descriptors(path: Path) -> dict[str, dict[str, int]]:
    """{kernel: {directive: value}} as llvm-objdump disassembles the object's .rodata."""
    text = subprocess.run([_objdump(), "-D", "-j", ".rodata", "--mcpu=gfx11-generic", str(path)],
                          capture_output=True, text=True, check=True).stdout
    found: dict[str, dict[str, int]] = {}
    for name, body in re.findall(r"\.amdhsa_kernel (\S+)\n(.*?)\.end_amdhsa_kernel", text, re.S):
        found[name] = {key: int(value) for key, value in re.findall(r"\.amdhsa_(\w+) (\d+)", body)}
    return found


def _function_symbols(path: Path) -> dict[str, int]:
    text = subprocess.run([_objdump(), "--syms", str(path)], capture_output=True, text=True, check=True).stdout
    line = re.compile(r"^([0-9a-f]+) .*\bF \.text\t\S+ (?:\.\w+ )?(\S+)$", re.M)  # value ... F .text size [vis] name
    return {m.group(2): int(m.group(1), 16) for m in line.finditer(text)}


@pytest.fixture(scope="module")
def rdna3_objects(built: Path) -> list[Path]:
    objects = sorted((built / "outputs" / "rmsnorm" / "gfx11-generic").glob("*.hsaco"))
    assert objects
    return objects


@pytest.mark.slow
def test_each_kernel_matches_llvms_reading_of_its_descriptor(rdna3_objects: list[Path]) -> None:
    for path in rdna3_objects:
        program = load(path.read_bytes())
        llvm = _llvm_descriptors(path)
        entries = _function_symbols(path)
        assert set(program.kernels) == set(llvm) == set(entries), path.name
        for name, kernel in program.kernels.items():
            d, want = kernel.descriptor, llvm[name]
            assert kernel.entry == entries[name], name  # descriptor address + its entry offset = the function
            assert d.group_segment_bytes == want["group_segment_fixed_size"]
            assert d.private_segment_bytes == want["private_segment_fixed_size"]
            assert d.kernarg_bytes == want["kernarg_size"]
            assert d.wave32 == bool(want["wavefront_size32"])
            assert d.round_mode_32 == want["float_round_mode_32"]
            assert d.round_mode_16_64 == want["float_round_mode_16_64"]
            assert d.denorm_mode_32 == want["float_denorm_mode_32"]
            assert d.denorm_mode_16_64 == want["float_denorm_mode_16_64"]
            assert d.ieee_mode == bool(want["ieee_mode"]) and d.dx10_clamp == bool(want["dx10_clamp"])
            assert d.workitem_id_vgprs == want["system_vgpr_workitem_id"]
            assert d.scratch_enabled == bool(want["enable_private_segment"])
            assert set(d.workgroup_id_sgprs) == {a for a in "xyz" if want[f"system_sgpr_workgroup_id_{a}"]}
            assert ("kernarg_segment_ptr", 0) in d.user_sgprs() and want["user_sgpr_kernarg_segment_ptr"] == 1
            assert d.user_sgpr_count >= 2  # the kernarg pointer's two SGPRs come first
            program.code_at(kernel.entry, 4)  # the entry is inside .text


@pytest.mark.slow
def test_arguments_and_workgroup_come_from_the_metadata_note(rdna3_objects: list[Path]) -> None:
    for path in rdna3_objects:
        meta = read_code_object(path.read_bytes()).kernels
        program = load(path.read_bytes())
        for kernel_meta in meta:
            kernel = program.kernels[kernel_meta[".name"]]
            assert [(a.offset, a.size) for a in kernel.arguments] == [
                (a[".offset"], a[".size"]) for a in kernel_meta[".args"]]
            assert kernel.wavefront_size == kernel_meta[".wavefront_size"] == 32
            assert kernel.workgroup_size is not None and kernel.workgroup_size[0] % 32 == 0


def test_a_hand_made_descriptor_decodes_field_by_field() -> None:
    rsrc1 = 3 << 12 | 1 << 14 | 2 << 16 | 1 << 18 | 1 << 21  # round 32=3, 16/64=1; denorm 32=2, 16/64=1; dx10
    rsrc2 = 1 | 6 << 1 | 1 << 7 | 1 << 9 | 2 << 11  # scratch, 6 user SGPRs, workgroup ids x and z, ids x/y/z
    properties = 1 << 1 | 1 << 3  # dispatch ptr, kernarg ptr; wave64
    raw = struct.pack("<IIII", 512, 16, 40, 0) + struct.pack("<q", -256) + bytes(20) \
        + struct.pack("<IIIHH", 0x55, rsrc1, rsrc2, properties, 0) + bytes(4)
    d = Descriptor.parse(raw)
    assert (d.group_segment_bytes, d.private_segment_bytes, d.kernarg_bytes, d.entry_offset) == (512, 16, 40, -256)
    assert (d.round_mode_32, d.round_mode_16_64, d.denorm_mode_32, d.denorm_mode_16_64) == (3, 1, 2, 1)
    assert d.dx10_clamp and not d.ieee_mode and d.scratch_enabled and not d.wave32 and d.rsrc3 == 0x55
    assert d.user_sgprs() == [("dispatch_ptr", 0), ("kernarg_segment_ptr", 2)]
    assert d.user_sgpr_count == 6 and d.workgroup_id_sgprs == {"x": 6, "z": 7} and d.workitem_id_vgprs == 2


@pytest.mark.slow
def test_what_is_not_a_launchable_object_is_named(rdna3_objects: list[Path]) -> None:
    with pytest.raises(NotLaunchable, match="64 bytes"):
        Descriptor.parse(bytes(10))
    with pytest.raises(NotLaunchable, match="not a readable code object"):
        load(b"\x7fELF" + bytes(60))
    data = bytearray(rdna3_objects[0].read_bytes())
    data[0x28:0x30] = struct.pack("<Q", len(data) + 4096)  # e_shoff: the section headers lie past the end
    with pytest.raises(NotLaunchable):
        load(bytes(data))
