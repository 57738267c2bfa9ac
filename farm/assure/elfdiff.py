"""Explain exactly what differs between two AMDGPU code objects, most explanatory difference first.

`farm diff A.hsaco B.hsaco [--json]`. An audit that rebuilds a shipped object only learns "the hashes
differ"; this names the level (linker identity, target, kernel metadata, kernel descriptor, .text,
sections, symbols, header, layout, raw bytes), the field and both values.
"""

from __future__ import annotations

import io
import json
import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_E_MACHINE, ENUM_E_TYPE, ENUM_E_VERSION, ENUM_EI_OSABI

from farm.accept.elfinfo import (
    EF_AMDGPU_GENERIC_VERSION_SHIFT,
    EF_AMDGPU_MACH,
    ELFOSABI_AMDGPU_HSA,
    NotACodeObject,
    read_code_object,
)
from farm.core.errors import FarmError

# Most explanatory first: a different linker or target explains everything below it; a metadata
# change explains the code change; which sections' bytes differ ("data") is the inventory behind the
# finer levels; layout and raw offsets are mostly consequences.
LEVELS = ("file", "linker", "target", "kernel", "metadata", "descriptor", "text", "section", "symbol",
          "data", "header", "layout", "raw")

KD_SIZE = 64
# AMDGPU kernel descriptor (code object v3+): (offset, size, field); see LLVM AMDGPUUsage.
KD_FIELDS = (
    (0, 4, "group_segment_fixed_size"), (4, 4, "private_segment_fixed_size"), (8, 4, "kernarg_size"),
    (12, 4, "reserved0"), (16, 8, "kernel_code_entry_byte_offset"), (24, 20, "reserved1"),
    (44, 4, "compute_pgm_rsrc3"), (48, 4, "compute_pgm_rsrc1"), (52, 4, "compute_pgm_rsrc2"),
    (56, 2, "kernel_code_properties"), (58, 2, "kernarg_preload"), (60, 4, "reserved3"),
)
# Per-kernel metadata fields, ABI and resource limits before the register counts they cause.
KERNEL_FIELD_ORDER = (
    ".symbol", ".wavefront_size", ".kernarg_segment_size", ".kernarg_segment_align", ".args",
    ".group_segment_fixed_size", ".private_segment_fixed_size", ".uses_dynamic_stack",
    ".vgpr_spill_count", ".sgpr_spill_count", ".vgpr_count", ".agpr_count", ".sgpr_count",
)
FEATURE_SETTING_V4 = ("unsupported", "any", "off", "on")  # e_flags xnack/sramecc 2-bit fields (ABI v4+)


class _Absent:
    """A field or entry that one side does not have (distinct from a msgpack nil)."""

    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class Difference:
    """One difference: `level` (see LEVELS), `field`, the value on each side, and a one-line message."""

    level: str
    field: str
    a: Any
    b: Any
    message: str
    detail: str = ""  # extra context for the full listing only (e.g. the differing instruction words)
    offset: int | None = None  # first differing byte, relative to the section (or the file, level raw)
    where: str | None = None  # the symbol containing `offset`, as "name+0xoff"

    @property
    def rank(self) -> int:
        return LEVELS.index(self.level)


# --------------------------------------------------------------------------------------------------
# Parsing: everything compared, read once with pyelftools into plain values.


@dataclass
class _Section:
    name: str
    index: int
    type: str
    flags: int
    addr: int
    offset: int
    size: int
    align: int
    entsize: int
    link: int
    info: int
    data: bytes
    notes: list[tuple[str, Any, int]]


@dataclass
class _Symbol:
    table: str
    name: str
    value: int
    size: int
    type: str
    bind: str
    visibility: str
    section: str


@dataclass
class _Parsed:
    data: bytes
    header: dict[str, Any]
    sections: dict[str, _Section]
    segments: list[dict[str, Any]]
    symbols: dict[tuple[str, str, int], _Symbol]
    metadata: dict[str, Any] | None
    problem: str  # why it is not a code object ("" when it is)


def _num(enum: dict[str, int], value: Any) -> Any:
    """pyelftools gives known enum values as names; compare and show numbers."""
    return enum.get(value, value) if isinstance(value, str) else value


def _header(elf: ELFFile) -> dict[str, Any]:
    h, ident = elf.header, elf.header["e_ident"]
    return {
        "EI_CLASS": ident["EI_CLASS"], "EI_DATA": ident["EI_DATA"], "EI_VERSION": ident["EI_VERSION"],
        "EI_OSABI": _num(ENUM_EI_OSABI, ident["EI_OSABI"]), "EI_ABIVERSION": ident["EI_ABIVERSION"],
        "e_type": _num(ENUM_E_TYPE, h["e_type"]), "e_machine": _num(ENUM_E_MACHINE, h["e_machine"]),
        "e_version": _num(ENUM_E_VERSION, h["e_version"]), "e_entry": h["e_entry"], "e_phoff": h["e_phoff"],
        "e_shoff": h["e_shoff"], "e_flags": h["e_flags"], "e_ehsize": h["e_ehsize"],
        "e_phentsize": h["e_phentsize"], "e_phnum": h["e_phnum"], "e_shentsize": h["e_shentsize"],
        "e_shnum": h["e_shnum"], "e_shstrndx": h["e_shstrndx"],
    }


def _sections(elf: ELFFile) -> dict[str, _Section]:
    found: dict[str, _Section] = {}
    for index, sec in enumerate(elf.iter_sections()):
        h = sec.header
        name = sec.name or f"[{index}]"  # the null section, or a nameless one
        if name in found:  # duplicate names stay distinguishable
            name = f"{name}#{index}"
        nobits = h["sh_type"] == "SHT_NOBITS"
        notes = [(n["n_name"], n["n_type"], n["n_descsz"]) for n in sec.iter_notes()] \
            if h["sh_type"] == "SHT_NOTE" else []
        found[name] = _Section(name, index, str(h["sh_type"]), h["sh_flags"], h["sh_addr"], h["sh_offset"],
                               h["sh_size"], h["sh_addralign"], h["sh_entsize"], h["sh_link"], h["sh_info"],
                               b"" if nobits else sec.data(), notes)
    return found


def _symbols(elf: ELFFile, by_index: dict[int, str]) -> dict[tuple[str, str, int], _Symbol]:
    found: dict[tuple[str, str, int], _Symbol] = {}
    for table in (".symtab", ".dynsym"):
        sec = elf.get_section_by_name(table)
        if sec is None or not hasattr(sec, "iter_symbols"):
            continue
        for sym in sec.iter_symbols():
            shndx = sym["st_shndx"]
            where = by_index.get(shndx, str(shndx)) if isinstance(shndx, int) else str(shndx)
            key = (table, sym.name, 0)
            while key in found:  # repeated names (locals): keep each, in table order
                key = (table, sym.name, key[2] + 1)
            found[key] = _Symbol(table, sym.name, sym["st_value"], sym["st_size"], str(sym["st_info"]["type"]),
                                 str(sym["st_info"]["bind"]), str(sym["st_other"]["visibility"]), where)
    return found


def _parse(data: bytes) -> _Parsed | str:
    """Everything compare() looks at, or why `data` is not a readable ELF file."""
    try:
        elf = ELFFile(io.BytesIO(data))
        sections = _sections(elf)
        parsed = _Parsed(data, _header(elf), sections, [dict(s.header) for s in elf.iter_segments()],
                         _symbols(elf, {s.index: s.name for s in sections.values()}), None, "")
    except Exception as exc:  # pyelftools raises many types on garbage input
        return f"not a readable ELF file ({type(exc).__name__}: {exc})"
    try:
        parsed.metadata = read_code_object(data).metadata
    except NotACodeObject as exc:
        parsed.problem = str(exc)
    return parsed


# --------------------------------------------------------------------------------------------------
# Formatting values.


def _show(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, separators=(", ", ": "), default=repr)
    return str(value)


def _hex(value: Any, width: int = 0) -> str:
    return f"0x{value:0{width}x}" if isinstance(value, int) else _show(value)


def _jsonable(value: Any) -> Any:
    if value is ABSENT:
        return None
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def _only(mine: dict[Any, Any], other: dict[Any, Any]) -> list[Any]:
    """Keys of `mine` missing from `other`, in `mine`'s order (sets would make the listing unstable)."""
    return [k for k in mine if k not in other]


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same type: a msgpack `true` and `1` are different bytes."""
    return type(a) is type(b) and a == b


def _first_difference(a: bytes, b: bytes) -> int | None:
    if a == b:
        return None
    n = min(len(a), len(b))
    # Compare in blocks, then bytewise in the first differing block; n when one is a prefix of the other.
    step = 256
    for start in range(0, n, step):
        end = min(start + step, n)
        if a[start:end] != b[start:end]:
            return next(i for i in range(start, end) if a[i] != b[i])
    return n


def _words(data: bytes, offset: int) -> str:
    """The (up to) two instruction dwords around `offset`, as hex: enough to spot a changed encoding."""
    start = offset - offset % 4
    chunk = data[start:start + 8]
    return " ".join(chunk[i:i + 4][::-1].hex() for i in range(0, len(chunk), 4)) or "(end)"


def _symbol_at(parsed: _Parsed, section: _Section, offset: int) -> str | None:
    """'kernel+0x1a4' for the sized symbol covering `offset` in an allocated section."""
    addr = section.addr + offset
    hits = [s for s in parsed.symbols.values() if s.section == section.name and s.size
            and s.value <= addr < s.value + s.size and s.table == ".symtab"]
    hits = hits or [s for s in parsed.symbols.values() if s.section == section.name and s.size
                    and s.value <= addr < s.value + s.size]
    if not hits:
        return None
    sym = min(hits, key=lambda s: s.size)
    return f"{sym.name}+0x{addr - sym.value:x}"


# --------------------------------------------------------------------------------------------------
# The comparisons, one per level.


def _comment_strings(parsed: _Parsed) -> list[str]:
    sec = parsed.sections.get(".comment")
    if sec is None:
        return []
    return [s.decode("utf-8", "replace").strip() for s in sec.data.split(b"\0") if s.strip()]


def _linker(a: _Parsed, b: _Parsed) -> Iterator[Difference]:
    ca, cb = _comment_strings(a), _comment_strings(b)
    if ca == cb:
        return
    la, lb = [s for s in ca if s.startswith("Linker:")], [s for s in cb if s.startswith("Linker:")]
    what, sa, sb = ("linker", la, lb) if la != lb else ("toolchain identity", ca, cb)

    def show(strings: list[str]) -> str:
        return repr("; ".join(strings)) if strings else "(none)"

    yield Difference("linker", ".comment", ca, cb, f"{what} differs (.comment: {show(sa)} vs {show(sb)})")


def _e_flags_fields(e_flags: int, abi_version: int) -> dict[str, int | str]:
    """e_flags split the way the loader reads it: machine, generic version, feature settings, the rest."""
    if abi_version >= 2:  # code object v4+: 2-bit xnack/sramecc settings
        features = {"xnack": FEATURE_SETTING_V4[(e_flags >> 8) & 3],
                    "sramecc": FEATURE_SETTING_V4[(e_flags >> 10) & 3]}
        known = EF_AMDGPU_MACH | 0xF00
    else:  # code object v3: one bit each
        features = {"xnack": "on" if e_flags & 0x100 else "off", "sramecc": "on" if e_flags & 0x200 else "off"}
        known = EF_AMDGPU_MACH | 0x300
    known |= 0xFF << EF_AMDGPU_GENERIC_VERSION_SHIFT
    return {"machine": e_flags & EF_AMDGPU_MACH, "generic version": (e_flags >> EF_AMDGPU_GENERIC_VERSION_SHIFT) & 0xFF,
            **features, "other bits": e_flags & ~known}


def _osabi(value: Any) -> str:
    return f"{value} (AMDGPU_HSA)" if value == ELFOSABI_AMDGPU_HSA else str(value)


def _target(a: _Parsed, b: _Parsed) -> Iterator[Difference]:
    ha, hb = a.header, b.header
    if ha["e_machine"] != hb["e_machine"]:
        yield Difference("target", "e_machine", ha["e_machine"], hb["e_machine"],
                         f"e_machine {ha['e_machine']} vs {hb['e_machine']} (AMDGPU is 224)")
    fa = _e_flags_fields(ha["e_flags"], ha["EI_ABIVERSION"])
    fb = _e_flags_fields(hb["e_flags"], hb["EI_ABIVERSION"])
    for key, va in fa.items():
        vb = fb[key]
        if va != vb:
            shown = (_hex(va, 3), _hex(vb, 3)) if key in ("machine", "other bits") else (str(va), str(vb))
            yield Difference("target", f"e_flags.{key}", va, vb, f"e_flags {key} {shown[0]} vs {shown[1]}",
                             detail=f"e_flags 0x{ha['e_flags']:08x} vs 0x{hb['e_flags']:08x}")
    if ha["EI_OSABI"] != hb["EI_OSABI"]:
        yield Difference("target", "EI_OSABI", ha["EI_OSABI"], hb["EI_OSABI"],
                         f"OS/ABI {_osabi(ha['EI_OSABI'])} vs {_osabi(hb['EI_OSABI'])}")
    if ha["EI_ABIVERSION"] != hb["EI_ABIVERSION"]:
        va, vb = ha["EI_ABIVERSION"], hb["EI_ABIVERSION"]
        yield Difference("target", "EI_ABIVERSION", va, vb,
                         f"ELF ABI version {va} vs {vb} (code object v{va + 2} vs v{vb + 2})")
    for key in ("amdhsa.target", "amdhsa.version"):
        va, vb = (a.metadata or {}).get(key, ABSENT), (b.metadata or {}).get(key, ABSENT)
        if (a.metadata is not None and b.metadata is not None) and not _same(va, vb):
            yield Difference("target", key, va, vb, f"{key} {_show(va)} vs {_show(vb)}")


def _ordered_keys(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    keys = set(a) | set(b)
    first = [k for k in KERNEL_FIELD_ORDER if k in keys]
    return first + sorted(keys - set(first), key=str)


def _is_records(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, dict) for v in value) and bool(value)


def _value_diffs(path: str, a: Any, b: Any) -> Iterator[tuple[str, Any, Any]]:
    """(path, a, b) for every leaf that differs; lists of records (.args) are compared entry by entry."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in _ordered_keys(a, b):
            yield from _value_diffs(f"{path}{key}", a.get(key, ABSENT), b.get(key, ABSENT))
    elif _is_records(a) and _is_records(b):
        if len(a) != len(b):
            yield f"{path} count", len(a), len(b)
        for i in range(max(len(a), len(b))):
            yield from _value_diffs(f"{path}[{i}]", a[i] if i < len(a) else ABSENT, b[i] if i < len(b) else ABSENT)
    elif not _same(a, b):
        yield path, a, b


def _kernels_by_name(metadata: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for i, kernel in enumerate(metadata.get("amdhsa.kernels", [])):
        name = str(kernel.get(".name", f"[{i}]")) if isinstance(kernel, dict) else f"[{i}]"
        found[name if name not in found else f"{name}#{i}"] = kernel if isinstance(kernel, dict) else {}
    return found


def _kernels(a: _Parsed, b: _Parsed) -> Iterator[Difference]:
    if a.metadata is None or b.metadata is None:
        return
    ka, kb = _kernels_by_name(a.metadata), _kernels_by_name(b.metadata)
    for name in _only(ka, kb):
        yield Difference("kernel", name, name, ABSENT, f"kernel {name} only in A")
    for name in _only(kb, ka):
        yield Difference("kernel", name, ABSENT, name, f"kernel {name} only in B")
    common = [n for n in ka if n in kb]
    if common != [n for n in kb if n in ka]:
        yield Difference("metadata", "amdhsa.kernels order", common, [n for n in kb if n in ka],
                         "amdhsa.kernels listed in a different order")
    for name in common:
        for path, va, vb in _value_diffs("", ka[name], kb[name]):
            yield Difference("metadata", f"{name} {path}", va, vb, f"{name} {path} {_show(va)} vs {_show(vb)}")


def _metadata_rest(a: _Parsed, b: _Parsed) -> Iterator[Difference]:
    """Top-level metadata keys other than target/version/kernels (e.g. amdhsa.printf), and note lists."""
    if a.metadata is not None and b.metadata is not None:
        skip = {"amdhsa.target", "amdhsa.version", "amdhsa.kernels"}
        rest_a = {k: v for k, v in a.metadata.items() if k not in skip}
        rest_b = {k: v for k, v in b.metadata.items() if k not in skip}
        for path, va, vb in _value_diffs("", rest_a, rest_b):
            yield Difference("metadata", path, va, vb, f"{path} {_show(va)} vs {_show(vb)}")
    for name in [n for n in a.sections if n in b.sections]:
        na, nb = a.sections[name].notes, b.sections[name].notes
        if na != nb:
            yield Difference("metadata", f"{name} notes", na, nb,
                             f"note entries in {name} (name, type, size): {_show(na)} vs {_show(nb)}")


def _descriptors(a: _Parsed, b: _Parsed) -> Iterator[Difference]:
    """Kernel descriptors (`<kernel>.kd`, 64 bytes): what the loader actually programs, field by field."""
    for key, sa in a.symbols.items():
        sb = b.symbols.get(key)
        if key[0] != ".symtab" or sb is None or not sa.name.endswith(".kd"):
            continue
        da, db = _kd_bytes(a, sa), _kd_bytes(b, sb)
        if da is None or db is None or da == db:
            continue
        for offset, size, name in KD_FIELDS:
            va = int.from_bytes(da[offset:offset + size], "little")
            vb = int.from_bytes(db[offset:offset + size], "little")
            if va != vb:
                yield Difference("descriptor", f"{sa.name} {name}", va, vb,
                                 f"{sa.name} {name} {_hex(va)} vs {_hex(vb)}",
                                 detail=_rsrc1_detail(va, vb) if name == "compute_pgm_rsrc1" else "", offset=offset)


def _rsrc1_detail(a: int, b: int) -> str:
    """COMPUTE_PGM_RSRC1 bits 5:0 / 9:6 are the granulated VGPR / SGPR counts the hardware allocates."""
    return (f"granulated VGPR count {a & 0x3F} vs {b & 0x3F}, "
            f"granulated SGPR count {(a >> 6) & 0xF} vs {(b >> 6) & 0xF}")


def _kd_bytes(parsed: _Parsed, sym: _Symbol) -> bytes | None:
    sec = parsed.sections.get(sym.section)
    if sec is None or sym.size != KD_SIZE:
        return None
    start = sym.value - sec.addr
    if start < 0:
        return None
    data = sec.data[start:start + KD_SIZE]
    return data if len(data) == KD_SIZE else None


def _code_section(parsed: _Parsed) -> _Section | None:
    return parsed.sections.get(".text")


def _text(a: _Parsed, b: _Parsed) -> Iterator[Difference]:
    ta, tb = _code_section(a), _code_section(b)
    if ta is None or tb is None or ta.data == tb.data:
        return
    if len(ta.data) != len(tb.data):
        yield Difference("text", ".text size", len(ta.data), len(tb.data),
                         f".text size {len(ta.data)} vs {len(tb.data)} bytes")
    offset = _first_difference(ta.data, tb.data)
    assert offset is not None
    where = _symbol_at(a, ta, offset) or _symbol_at(b, tb, offset)
    changed = sum(x != y for x, y in zip(ta.data, tb.data, strict=False))
    yield Difference("text", ".text", _words(ta.data, offset), _words(tb.data, offset),
                     f".text differs from offset 0x{offset:x}" + (f" ({where})" if where else ""),
                     detail=f"dwords {_words(ta.data, offset)} vs {_words(tb.data, offset)}; "
                            f"{changed} of {min(len(ta.data), len(tb.data))} common bytes differ",
                     offset=offset, where=where)


SECTION_ATTRS = (("type", "sh_type", str), ("flags", "sh_flags", hex), ("align", "sh_addralign", str),
                 ("entsize", "sh_entsize", str), ("link", "sh_link", str), ("info", "sh_info", str))
SECTION_LAYOUT = (("addr", "sh_addr", hex), ("offset", "sh_offset", hex))


def _sections_diff(a: _Parsed, b: _Parsed) -> Iterator[Difference]:
    for name in _only(a.sections, b.sections):
        yield Difference("section", name, a.sections[name].size, ABSENT,
                         f"section {name} only in A ({a.sections[name].size} bytes)")
    for name in _only(b.sections, a.sections):
        yield Difference("section", name, ABSENT, b.sections[name].size,
                         f"section {name} only in B ({b.sections[name].size} bytes)")
    for name, sa in a.sections.items():
        sb = b.sections.get(name)
        if sb is None:
            continue
        yield from _section_attrs(name, sa, sb, SECTION_ATTRS, "section")
        if name != ".text" and sa.data != sb.data:  # .text has its own, more detailed level
            yield _section_data(a, name, sa, sb)


def _section_attrs(name: str, sa: _Section, sb: _Section, attrs: tuple[tuple[str, str, Callable[[Any], str]], ...],
                   level: str) -> Iterator[Difference]:
    for attr, label, show in attrs:
        va, vb = getattr(sa, attr), getattr(sb, attr)
        if va != vb:
            yield Difference(level, f"{name} {label}", va, vb, f"section {name} {label} {show(va)} vs {show(vb)}")


def _section_data(a: _Parsed, name: str, sa: _Section, sb: _Section) -> Difference:
    offset = _first_difference(sa.data, sb.data)
    assert offset is not None
    where = _symbol_at(a, sa, offset)
    sizes = f"size {len(sa.data)} vs {len(sb.data)} bytes, " if len(sa.data) != len(sb.data) else ""
    return Difference("data", f"{name} bytes", len(sa.data), len(sb.data),
                      f"section {name} differs ({sizes}from offset 0x{offset:x}" + (f", {where})" if where else ")"),
                      offset=offset, where=where)


SYMBOL_ATTRS = (("value", hex), ("size", str), ("type", str), ("bind", str), ("visibility", str), ("section", str))


def _symbol_label(key: tuple[str, str, int]) -> str:
    table, name, dup = key
    label = name or "(unnamed)"
    label += f"#{dup}" if dup else ""
    return label if table == ".symtab" else f"{label} ({table})"


def _symbols_diff(a: _Parsed, b: _Parsed) -> Iterator[Difference]:
    for key in _only(a.symbols, b.symbols):
        yield Difference("symbol", _symbol_label(key), key[1], ABSENT, f"symbol {_symbol_label(key)} only in A")
    for key in _only(b.symbols, a.symbols):
        yield Difference("symbol", _symbol_label(key), ABSENT, key[1], f"symbol {_symbol_label(key)} only in B")
    for key, sa in a.symbols.items():
        sb = b.symbols.get(key)
        if sb is None:
            continue
        for attr, show in SYMBOL_ATTRS:
            va, vb = getattr(sa, attr), getattr(sb, attr)
            if va != vb:
                label = _symbol_label(key)
                yield Difference("symbol", f"{label} {attr}", va, vb, f"symbol {label} {attr} {show(va)} vs {show(vb)}")


HEADER_FIELDS = ("EI_CLASS", "EI_DATA", "EI_VERSION", "e_type", "e_version", "e_entry", "e_ehsize",
                 "e_phentsize", "e_phnum", "e_shentsize", "e_shnum", "e_shstrndx")
LAYOUT_FIELDS = ("e_phoff", "e_shoff")
SEGMENT_FIELDS = ("p_type", "p_flags", "p_offset", "p_vaddr", "p_paddr", "p_filesz", "p_memsz", "p_align")


def _header_diff(a: _Parsed, b: _Parsed) -> Iterator[Difference]:
    for key in HEADER_FIELDS + LAYOUT_FIELDS:
        va, vb = a.header[key], b.header[key]
        if va != vb:
            level = "layout" if key in LAYOUT_FIELDS else "header"
            show = _hex if key in ("e_entry", *LAYOUT_FIELDS) else _show
            yield Difference(level, key, va, vb, f"{key} {show(va)} vs {show(vb)}")


def _layout(a: _Parsed, b: _Parsed) -> Iterator[Difference]:
    """Where things sit: mostly the consequence of a size change above, listed so nothing is hidden."""
    order_a = [n for n in a.sections if n in b.sections]
    order_b = [n for n in b.sections if n in a.sections]
    if order_a != order_b:
        yield Difference("layout", "section order", order_a, order_b, "sections are in a different order")
    for name, sa in a.sections.items():
        if name in b.sections:
            yield from _section_attrs(name, sa, b.sections[name], SECTION_LAYOUT, "layout")
    for i, (pa, pb) in enumerate(zip(a.segments, b.segments, strict=False)):
        for key in SEGMENT_FIELDS:
            if pa.get(key) != pb.get(key):
                yield Difference("layout", f"segment[{i}] {key}", pa.get(key), pb.get(key),
                                 f"program header {i} ({pa.get('p_type')}) {key} "
                                 f"{_hex(pa.get(key))} vs {_hex(pb.get(key))}")


def _region(parsed: _Parsed | str, offset: int) -> str:
    """Name the part of the file that holds `offset`: header, a table, a section, or padding after one."""
    if isinstance(parsed, str):
        return "unparsed file"
    h = parsed.header
    regions = [(0, h["e_ehsize"], "ELF header"),
               (h["e_phoff"], h["e_phoff"] + h["e_phnum"] * h["e_phentsize"], "program header table"),
               (h["e_shoff"], h["e_shoff"] + h["e_shnum"] * h["e_shentsize"], "section header table")]
    regions += [(s.offset, s.offset + s.size, f"section {s.name}") for s in parsed.sections.values()
                if s.type != "SHT_NOBITS" and s.size]
    for start, end, label in regions:
        if start <= offset < end:
            return f"{label}+0x{offset - start:x}" if start else label
    before = [(end, label) for _, end, label in regions if end <= offset]
    return f"padding after {max(before)[1]}" if before else "outside every known region"


def _raw(a: bytes, b: bytes, pa: _Parsed | str, found: list[Difference]) -> Iterator[Difference]:
    if len(a) != len(b):
        yield Difference("raw", "file size", len(a), len(b), f"file size {len(a)} vs {len(b)} bytes")
    if any(d.level not in ("file", "raw") for d in found):
        return  # the structured differences already say where
    offset = _first_difference(a, b)
    if offset is not None:
        region = _region(pa, offset)
        yield Difference("raw", "first differing file offset", a[offset:offset + 8].hex(), b[offset:offset + 8].hex(),
                         f"bytes differ from file offset 0x{offset:x} ({region})", offset=offset, where=region)


def _readable(side: str, parsed: _Parsed | str) -> Iterator[Difference]:
    problem = parsed if isinstance(parsed, str) else parsed.problem
    if problem:
        a, b = (problem, "ok") if side == "A" else ("ok", problem)
        yield Difference("file", "readable", a, b, f"{side} is not a readable code object: {problem}")


def compare(a: bytes, b: bytes) -> list[Difference]:
    """Every difference between code objects `a` and `b`, most explanatory first; [] when identical."""
    if a == b:
        return []
    pa, pb = _parse(a), _parse(b)
    found = [*_readable("A", pa), *_readable("B", pb)]
    if isinstance(pa, _Parsed) and isinstance(pb, _Parsed):
        for check in (_linker, _target, _kernels, _metadata_rest, _descriptors, _text, _sections_diff,
                      _symbols_diff, _header_diff, _layout):
            found += check(pa, pb)
    found += _raw(a, b, pa, found)
    return sorted(found, key=lambda d: d.rank)  # stable: each level keeps its own order


# --------------------------------------------------------------------------------------------------
# Output.


def summary(diffs: list[Difference]) -> str:
    """One line for an audit summary: the most explanatory difference (plus the code change it caused)."""
    if not diffs:
        return "identical"
    parts = [diffs[0]]
    if diffs[0].level in ("kernel", "metadata", "descriptor"):  # name the code change it goes with
        parts += [d for d in diffs if d.level == "text" and d.offset is not None][:1]
    text = "; ".join(d.message for d in parts)
    more = len(diffs) - len(parts)
    return text + (f" (+{more} more)" if more else "")


def render(diffs: list[Difference]) -> str:
    """The full listing: a summary line, then every difference with its level."""
    if not diffs:
        return "identical"
    lines = [f"differ: {summary(diffs)}", f"{len(diffs)} difference(s), most explanatory first:"]
    for d in diffs:
        lines.append(f"  {d.level:<10} {d.message}" + (f"  [{d.detail}]" if d.detail else ""))
    return "\n".join(lines)


def to_json(diffs: list[Difference]) -> list[dict[str, Any]]:
    return [{k: _jsonable(v) for k, v in asdict(d).items()} for d in diffs]


def _read(path_text: str) -> bytes:
    """The bytes of a regular file. Anything else is named for what it is (a directory is not "no such
    file"), and a FIFO is never opened for reading, which would block until a writer came."""
    path = Path(path_text)
    fix = "give the paths of two code objects (.hsaco)"
    try:
        kind = _kind_of(os.stat(path).st_mode)
        if kind is None:  # opened without blocking, and checked again: it may have been swapped meanwhile
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                kind = _kind_of(os.fstat(f.fileno()).st_mode)
                if kind is None:
                    return f.read()
    except FileNotFoundError:
        raise FarmError(f"no such file: {path}", fix) from None
    except OSError as exc:
        raise FarmError(f"cannot read {path}: {exc.strerror}", "check the path and its permissions") from None
    raise FarmError(f"{path} {kind}", fix)


def _kind_of(mode: int) -> str | None:
    """None for a regular file, else what to say about it."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory, not a code object"
    names = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))
    what = next((name for test, name in names if test(mode)), "a special file")
    return f"is not a regular file (it is {what})"


def main(flags: set[str], args: list[str]) -> int:
    """farm diff A.hsaco B.hsaco [--json]: exit 0 identical, 1 different (2 via FarmError: bad usage)."""
    usage = "usage: farm diff A.hsaco B.hsaco [--json]"
    unknown = flags - {"--json"}
    if unknown:
        raise FarmError(f"unknown flag(s) {', '.join(sorted(unknown))}; {usage}", "drop them")
    if len(args) != 2:
        raise FarmError(f"expected two code objects, got {len(args)}; {usage}", "name exactly two .hsaco files")
    data_a, data_b = _read(args[0]), _read(args[1])
    diffs = compare(data_a, data_b)
    if "--json" in flags:
        report = {"a": args[0], "b": args[1], "identical": not diffs, "summary": summary(diffs),
                  "differences": to_json(diffs)}
        print(json.dumps(report, indent=2))
    else:
        print(f"A: {args[0]} ({len(data_a)} bytes)\nB: {args[1]} ({len(data_b)} bytes)")
        print(render(diffs))
    return 1 if diffs else 0
