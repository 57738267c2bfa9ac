"""farm diff / farm.assure.elfdiff: every kind of change between two real code objects is named correctly.

Objects are real (built once by `farm build` for gfx942 and gfx950); variants are byte-level edits of
them: a patched .comment (same size, or rebuilt larger like Debian's LLD writes it), e_flags, e_ident,
msgpack metadata values re-packed in place, a .text byte, a kernel descriptor, a symbol, padding.
"""

from __future__ import annotations

import io
import json
import shutil
import struct
from pathlib import Path

import msgpack
import pytest
from conftest import copy_project, run_farm, write_lld19_toolchain
from elftools.elf.elffile import ELFFile

from farm.assure.elfdiff import compare, render, summary, to_json

pytestmark = pytest.mark.slow

OBJ = "rmsnorm/{target}/rmsnorm_f32_{phase}_generic.hsaco"
NAMES = "rmsnorm_f32_train_generic,rmsnorm_f32_infer_generic"  # the objects OBJ names: built, nothing else
KERNEL = "rmsnorm_fwd_0"
E_FLAGS_OFFSET = 0x30  # Elf64_Ehdr: e_ident 16, e_type 2, e_machine 2, e_version 4, e_entry/phoff/shoff 8 each
E_SHOFF_OFFSET = 0x28


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """outputs/ of a real build: gfx942 and gfx950, f32, train and infer phases (4 objects)."""
    project = copy_project(tmp_path_factory.mktemp("elfdiff"))
    run_farm(project, "build", "ops=[rmsnorm]", "targets=[gfx942,gfx950]", f"names=[{NAMES}]", check=True)
    return project / "outputs"


@pytest.fixture(scope="module")
def base(objects: Path) -> bytes:
    return (objects / OBJ.format(target="gfx942", phase="train")).read_bytes()


# ---- crafting variants -------------------------------------------------------------------------


def section(data: bytes, name: str) -> tuple[int, int, int, int]:
    """(index, sh_offset, sh_size, sh_addr) of section `name`."""
    elf = ELFFile(io.BytesIO(data))
    for i, sec in enumerate(elf.iter_sections()):
        if sec.name == name:
            return i, sec.header["sh_offset"], sec.header["sh_size"], sec.header["sh_addr"]
    raise KeyError(name)


def patch(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new):]


def repack(data: bytes, key: str, old: object, new: object, after: bytes = b"") -> bytes:
    """Re-pack one msgpack map entry of the metadata note in place (the encodings must be equally long);
    `after` anchors the search (e.g. the .offset of one .args entry)."""
    _, off, size, _ = section(data, ".note")
    old_b, new_b = msgpack.packb(key) + msgpack.packb(old), msgpack.packb(key) + msgpack.packb(new)
    assert len(old_b) == len(new_b)
    start = data.index(after, off, off + size) if after else off
    at = data.index(old_b, start, off + size)
    return patch(data, at, new_b)


def regrow_section(data: bytes, name: str, content: bytes) -> bytes:
    """Replace a non-allocated section's bytes, moving what follows it (sections and the section header
    table) by a multiple of 8, as a linker writing a longer .comment would."""
    elf = ELFFile(io.BytesIO(data))
    index, off, size, _ = section(data, name)
    shift = -(-max(0, len(content) - size) // 8) * 8
    body = content + b"\0" * (size + shift - len(content))
    out = bytearray(data[:off] + body + data[off + size:])
    shoff, shentsize = elf.header["e_shoff"], elf.header["e_shentsize"]
    if shoff > off:
        shoff += shift
        struct.pack_into("<Q", out, E_SHOFF_OFFSET, shoff)
    for i in range(elf.num_sections()):
        hdr = shoff + i * shentsize
        (sh_offset,) = struct.unpack_from("<Q", out, hdr + 24)
        if i == index:
            struct.pack_into("<Q", out, hdr + 32, len(content))
        elif sh_offset > off:
            struct.pack_into("<Q", out, hdr + 24, sh_offset + shift)
    return bytes(out)


def set_e_flags(data: bytes, e_flags: int) -> bytes:
    return patch(data, E_FLAGS_OFFSET, struct.pack("<I", e_flags))


def e_flags(data: bytes) -> int:
    return struct.unpack_from("<I", data, E_FLAGS_OFFSET)[0]


def symbol_entry(data: bytes, name: str) -> int:
    """File offset of `name`'s Elf64_Sym in .symtab."""
    elf = ELFFile(io.BytesIO(data))
    symtab = elf.get_section_by_name(".symtab")
    index = next(i for i, s in enumerate(symtab.iter_symbols()) if s.name == name)
    return symtab.header["sh_offset"] + index * symtab.header["sh_entsize"]


def fields(diffs: list) -> list[str]:
    return [d.field for d in diffs]


def only(diffs: list, level: str) -> list:
    return [d for d in diffs if d.level == level]


# ---- identical ---------------------------------------------------------------------------------


def test_identical_objects_have_no_differences(base: bytes) -> None:
    assert compare(base, bytes(base)) == []
    assert summary([]) == "identical"
    assert render([]) == "identical"
    assert to_json([]) == []


# ---- toolchain identity ------------------------------------------------------------------------


def test_linker_string_same_length(base: bytes) -> None:
    _, off, size, _ = section(base, ".comment")
    assert base[off:off + size] == b"Linker: LLD 22.1.8\0"
    diffs = compare(base, patch(base, off, b"Linker: LLD 19.1.7"))
    assert diffs[0].level == "linker"
    assert diffs[0].message == "linker differs (.comment: 'Linker: LLD 22.1.8' vs 'Linker: LLD 19.1.7')"
    assert summary(diffs).startswith("linker differs (.comment: 'Linker: LLD 22.1.8' vs 'Linker: LLD 19.1.7')")
    assert fields(diffs) == [".comment", ".comment bytes"]  # nothing else: only the string changed


def test_linker_string_longer_moves_only_layout(base: bytes) -> None:
    grown = regrow_section(base, ".comment", b"Linker: Debian LLD 19.1.7\0")
    diffs = compare(base, grown)
    assert diffs[0].message == "linker differs (.comment: 'Linker: LLD 22.1.8' vs 'Linker: Debian LLD 19.1.7')"
    # What a different linker of the same input changes here: .comment, and where later things sit.
    assert {d.level for d in diffs} == {"linker", "data", "layout", "raw"}
    assert "e_shoff" in fields(diffs) and ".symtab sh_offset" in fields(diffs)
    assert any(d.message == f"file size {len(base)} vs {len(grown)} bytes" for d in diffs)


def test_other_comment_strings_are_toolchain_identity(base: bytes) -> None:
    grown = regrow_section(base, ".comment", b"Linker: LLD 22.1.8\0clang version 99\0")
    diffs = compare(base, grown)
    assert diffs[0].message.startswith("toolchain identity differs (.comment: 'Linker: LLD 22.1.8' vs "
                                       "'Linker: LLD 22.1.8; clang version 99')")


def test_real_object_from_another_linker(objects: Path, tmp_path: Path) -> None:
    """A real rebuild with Debian's LLD 19 (a second pinned toolchain) differs only in linker identity."""
    project = copy_project(tmp_path)
    write_lld19_toolchain(project, "pinned")
    run_farm(project, "build", "ops=[rmsnorm]", "targets=[gfx942]", "names=[rmsnorm_f32_train_generic]", check=True)
    rel = OBJ.format(target="gfx942", phase="train")
    diffs = compare((objects / rel).read_bytes(), (project / "outputs" / rel).read_bytes())
    assert diffs[0].message == "linker differs (.comment: 'Linker: LLD 22.1.8' vs 'Linker: Debian LLD 19.1.7')"
    assert not [d for d in diffs if d.level in ("target", "kernel", "metadata", "descriptor", "text", "symbol")]


# ---- target ------------------------------------------------------------------------------------


def test_real_objects_for_two_targets(objects: Path) -> None:
    a = (objects / OBJ.format(target="gfx942", phase="train")).read_bytes()
    b = (objects / OBJ.format(target="gfx950", phase="train")).read_bytes()
    diffs = compare(a, b)
    assert summary(diffs).startswith("e_flags machine 0x04c vs 0x04f")
    assert (diffs[0].a, diffs[0].b) == (0x04C, 0x04F)
    target = only(diffs, "target")
    assert fields(target) == ["e_flags.machine", "amdhsa.target"]
    assert target[1].b == "amdgcn-amd-amdhsa-unknown-gfx950"
    assert only(diffs, "text")  # the code differs too, listed after the target


@pytest.mark.parametrize(("bits", "field", "message"), [
    (0x04F, "e_flags.machine", "e_flags machine 0x04c vs 0x04f"),
    (0x0100_0000, "e_flags.generic version", "e_flags generic version 0 vs 1"),
    (0x200, "e_flags.xnack", "e_flags xnack any vs on"),
    (0x800, "e_flags.sramecc", "e_flags sramecc any vs on"),
    (0x1000, "e_flags.other bits", "e_flags other bits 0x000 vs 0x1000"),
])
def test_e_flags_split(base: bytes, bits: int, field: str, message: str) -> None:
    flags = e_flags(base)
    assert flags == 0x54C  # gfx942, xnack any, sramecc any
    new = (flags & ~0xFF) | bits if field == "e_flags.machine" else flags | bits
    diffs = compare(base, set_e_flags(base, new))
    assert fields(diffs) == [field]
    assert diffs[0].message == message
    assert summary(diffs) == message


def test_os_abi_and_abi_version(base: bytes) -> None:
    diffs = compare(base, patch(base, 7, bytes([0, 3])))  # EI_OSABI 64 -> 0, EI_ABIVERSION 4 -> 3
    assert [d.message for d in diffs] == ["OS/ABI 64 (AMDGPU_HSA) vs 0",
                                          "ELF ABI version 4 vs 3 (code object v6 vs v5)"]


def test_amdhsa_version(base: bytes) -> None:
    diffs = compare(base, repack(base, "amdhsa.version", [1, 2], [1, 3]))
    assert diffs[0].message == "amdhsa.version [1, 2] vs [1, 3]"


# ---- kernel metadata ---------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "old", "new"), [
    (".vgpr_count", 42, 26), (".sgpr_count", 34, 40), (".agpr_count", 0, 4),
    (".group_segment_fixed_size", 16, 32), (".private_segment_fixed_size", 0, 16),
    (".vgpr_spill_count", 0, 3), (".sgpr_spill_count", 0, 1), (".kernarg_segment_size", 52, 56),
    (".wavefront_size", 64, 32),
])
def test_kernel_metadata_field(base: bytes, key: str, old: int, new: int) -> None:
    diffs = compare(base, repack(base, key, old, new))
    assert fields(diffs) == [f"{KERNEL} {key}", ".note bytes"]
    assert diffs[0].message == f"{KERNEL} {key} {old} vs {new}"
    assert (diffs[0].a, diffs[0].b) == (old, new)


def test_kernel_arg_entry(base: bytes) -> None:
    anchor = msgpack.packb(".offset") + msgpack.packb(32)  # the first by-value argument (.args[4])
    diffs = compare(base, repack(base, ".size", 4, 8, after=anchor))
    assert diffs[0].message == f"{KERNEL} .args[4].size 4 vs 8"


def test_metadata_bool_is_not_int(base: bytes) -> None:
    diffs = compare(base, repack(base, ".uses_dynamic_stack", False, 0))
    assert diffs[0].message == f"{KERNEL} .uses_dynamic_stack False vs 0"


def test_kernel_present_on_one_side_only(base: bytes) -> None:
    diffs = compare(base, repack(base, ".name", KERNEL, "rmsnorm_fwd_9"))
    assert [d.message for d in only(diffs, "kernel")] == [f"kernel {KERNEL} only in A",
                                                          "kernel rmsnorm_fwd_9 only in B"]
    # The side that lacks the kernel is null in JSON (before: to_json kept an unencodable object there,
    # so `farm diff --json` and the audit report failed on any entry present on one side only).
    rows = json.loads(json.dumps(to_json(only(diffs, "kernel"))))
    assert [(r["a"], r["b"]) for r in rows] == [(KERNEL, None), (None, "rmsnorm_fwd_9")]


def test_metadata_and_code_summary(objects: Path) -> None:
    """Same target, another phase: register counts, descriptor and code differ; the summary says both."""
    a = (objects / OBJ.format(target="gfx942", phase="train")).read_bytes()
    b = (objects / OBJ.format(target="gfx942", phase="infer")).read_bytes()
    diffs = compare(a, b)
    assert diffs[0].level == "metadata" and diffs[0].field.startswith(KERNEL)
    text = next(d for d in diffs if d.field == ".text")
    assert summary(diffs).startswith(f"{diffs[0].message}; .text differs from offset 0x{text.offset:x}")
    assert any(d.field == f"{KERNEL}.kd compute_pgm_rsrc1" for d in diffs)
    assert ".text size" in fields(diffs)


# ---- code, descriptor, symbols, sections -------------------------------------------------------


def test_text_byte(base: bytes) -> None:
    _, off, size, addr = section(base, ".text")
    changed = patch(base, off + 0x1A4, bytes([base[off + 0x1A4] ^ 0xFF]))
    diffs = compare(base, changed)
    assert fields(diffs) == [".text"]
    d = diffs[0]
    assert (d.offset, d.where) == (0x1A4, f"{KERNEL}+0x1a4")  # the kernel starts at .text's start
    assert summary(diffs) == f".text differs from offset 0x1a4 ({KERNEL}+0x1a4)"
    assert "1 of 5696 common bytes differ" in d.detail and size == 5696


def test_kernel_descriptor(base: bytes) -> None:
    _, off, _, _ = section(base, ".rodata")  # holds rmsnorm_fwd_0.kd (64 bytes) at its start
    rsrc2 = off + 52
    diffs = compare(base, patch(base, rsrc2, bytes([base[rsrc2] ^ 0x01])))
    assert fields(diffs) == [f"{KERNEL}.kd compute_pgm_rsrc2", ".rodata bytes"]
    assert diffs[1].where == f"{KERNEL}.kd+0x34"


def test_symbol_size(base: bytes) -> None:
    entry = symbol_entry(base, KERNEL)
    (size,) = struct.unpack_from("<Q", base, entry + 16)
    diffs = compare(base, patch(base, entry + 16, struct.pack("<Q", size - 12)))
    assert [d.message for d in diffs] == [f"symbol {KERNEL} size {size} vs {size - 12}",
                                          "section .symtab differs (from offset 0x{:x})".format(
                                              entry + 16 - section(base, ".symtab")[1])]


def test_section_renamed(base: bytes) -> None:
    _, off, size, _ = section(base, ".shstrtab")
    at = base.index(b".AMDGPU.gpr_maximums\0", off, off + size)
    diffs = compare(base, patch(base, at, b".AMDGPU.gpr_maximumz"))
    messages = [d.message for d in only(diffs, "section")]
    assert "section .AMDGPU.gpr_maximums only in A (0 bytes)" in messages
    assert "section .AMDGPU.gpr_maximumz only in B (0 bytes)" in messages


def test_padding_byte_gives_file_offset(base: bytes) -> None:
    _, off, size, _ = section(base, ".comment")
    gap = off + size  # .symtab is 8-aligned, so padding follows the 19-byte .comment
    assert section(base, ".symtab")[1] > gap and base[gap] == 0
    diffs = compare(base, patch(base, gap, b"\x01"))
    assert [d.message for d in diffs] == [f"bytes differ from file offset 0x{gap:x} (padding after section .comment)"]
    assert diffs[0].offset == gap


def test_order_most_explanatory_first(base: bytes) -> None:
    _, coff, _, _ = section(base, ".comment")
    _, toff, _, _ = section(base, ".text")
    data = patch(base, toff + 8, b"\xff")
    data = repack(data, ".vgpr_count", 42, 26)
    data = patch(data, coff, b"Linker: LLD 19.1.7")
    levels = [d.level for d in compare(base, data)]
    assert levels == sorted(levels, key=["linker", "metadata", "descriptor", "text", "data"].index)
    assert levels[0] == "linker" and "metadata" in levels and "text" in levels


# ---- not a code object ---------------------------------------------------------------------------


@pytest.mark.parametrize("other", [b"not an elf", b"", b"\x7fELF" + b"\0" * 60])
def test_unreadable_side_is_a_difference(base: bytes, other: bytes) -> None:
    for a, b, side in ((base, other, "B"), (other, base, "A")):
        diffs = compare(a, b)
        assert diffs[0].level == "file"
        assert diffs[0].message.startswith(f"{side} is not a readable code object: ")
        json.dumps(to_json(diffs))


def test_elf_without_metadata_note(base: bytes) -> None:
    _, off, size, _ = section(base, ".note")
    at = base.index(b"AMDGPU\0", off, off + size)
    diffs = compare(base, patch(base, at, b"AMDGPV"))
    assert diffs[0].message == "B is not a readable code object: no NT_AMDGPU_METADATA note"
    assert any(d.field == ".note notes" for d in diffs)


# ---- output and CLI ------------------------------------------------------------------------------


def test_json_round_trips(objects: Path) -> None:
    a = (objects / OBJ.format(target="gfx942", phase="train")).read_bytes()
    b = (objects / OBJ.format(target="gfx950", phase="infer")).read_bytes()
    rows = json.loads(json.dumps(to_json(compare(a, b))))
    assert rows[0]["level"] == "target" and rows[0]["field"] == "e_flags.machine"
    assert set(rows[0]) == {"level", "field", "a", "b", "message", "detail", "offset", "where"}


def test_cli(objects: Path, base: bytes, tmp_path: Path) -> None:
    a = objects / OBJ.format(target="gfx942", phase="train")
    b = objects / OBJ.format(target="gfx950", phase="train")
    same = tmp_path / "same.hsaco"
    shutil.copyfile(a, same)

    proc = run_farm(objects.parent, "diff", str(a), str(b))
    assert proc.returncode == 1, proc.stderr
    assert "differ: e_flags machine 0x04c vs 0x04f" in proc.stdout
    assert "  target     amdhsa.target 'amdgcn-amd-amdhsa-unknown-gfx942' vs " in proc.stdout

    proc = run_farm(objects.parent, "diff", str(a), str(same))
    assert proc.returncode == 0 and proc.stdout.strip().endswith("identical")

    proc = run_farm(objects.parent, "diff", str(a), str(b), "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["identical"] is False
    assert report["summary"].startswith("e_flags machine 0x04c vs 0x04f")

    for args in ((str(a),), (str(a), str(tmp_path / "missing.hsaco")), (str(a), str(b), "--bogus")):
        proc = run_farm(objects.parent, "diff", *args)
        assert proc.returncode == 2 and "farm diff: error:" in proc.stderr, args
