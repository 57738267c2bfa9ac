"""Parsing: everything the views compare, read once with pyelftools into plain values."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_E_MACHINE, ENUM_E_TYPE, ENUM_E_VERSION, ENUM_EI_OSABI

from farm.elf.code_object import NotACodeObject, read_code_object

# The code object's msgpack metadata as decoded from the file: data to compare, never trusted to have a shape.
Metadata = dict[str, Any]

SEGMENT_FIELDS = ("p_type", "p_flags", "p_offset", "p_vaddr", "p_paddr", "p_filesz", "p_memsz", "p_align")


@dataclass(frozen=True)
class Header:
    """The ELF header; enum fields as numbers where pyelftools knows their names (see `_num`)."""

    EI_CLASS: int | str
    EI_DATA: int | str
    EI_VERSION: int | str
    EI_OSABI: int | str
    EI_ABIVERSION: int
    e_type: int | str
    e_machine: int | str
    e_version: int | str
    e_entry: int
    e_phoff: int
    e_shoff: int
    e_flags: int
    e_ehsize: int
    e_phentsize: int
    e_phnum: int
    e_shentsize: int
    e_shnum: int
    e_shstrndx: int


@dataclass(frozen=True)
class Segment:
    """One program header, field by field (SEGMENT_FIELDS)."""

    p_type: int | str
    p_flags: int
    p_offset: int
    p_vaddr: int
    p_paddr: int
    p_filesz: int
    p_memsz: int
    p_align: int


@dataclass
class Section:
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
    notes: list[tuple[str, Any, int]]  # (name, type, descriptor size) of each note, for SHT_NOTE sections


@dataclass
class Symbol:
    table: str
    name: str
    value: int
    size: int
    type: str
    bind: str
    visibility: str
    section: str


# (table, name, n): the n-th symbol of that name in that table (locals may repeat a name).
SymbolKey = tuple[str, str, int]


@dataclass
class Parsed:
    data: bytes
    header: Header
    sections: dict[str, Section]
    segments: list[Segment]
    symbols: dict[SymbolKey, Symbol]
    metadata: Metadata | None
    problem: str  # why it is not a code object ("" when it is)

    def symbol_at(self, section: Section, offset: int) -> str | None:
        """'kernel+0x1a4' for the sized symbol covering `offset` in an allocated section."""
        addr = section.addr + offset
        covering = [s for s in self.symbols.values() if s.section == section.name and s.size
                    and s.value <= addr < s.value + s.size]
        hits = [s for s in covering if s.table == ".symtab"] or covering
        if not hits:
            return None
        sym = min(hits, key=lambda s: s.size)
        return f"{sym.name}+0x{addr - sym.value:x}"


def _num(enum: dict[str, int], value: Any) -> Any:
    """pyelftools gives known enum values as names; compare and show numbers."""
    return enum.get(value, value) if isinstance(value, str) else value


def _header(elf: ELFFile) -> Header:
    h, ident = elf.header, elf.header["e_ident"]
    return Header(
        EI_CLASS=ident["EI_CLASS"], EI_DATA=ident["EI_DATA"], EI_VERSION=ident["EI_VERSION"],
        EI_OSABI=_num(ENUM_EI_OSABI, ident["EI_OSABI"]), EI_ABIVERSION=ident["EI_ABIVERSION"],
        e_type=_num(ENUM_E_TYPE, h["e_type"]), e_machine=_num(ENUM_E_MACHINE, h["e_machine"]),
        e_version=_num(ENUM_E_VERSION, h["e_version"]), e_entry=h["e_entry"], e_phoff=h["e_phoff"],
        e_shoff=h["e_shoff"], e_flags=h["e_flags"], e_ehsize=h["e_ehsize"],
        e_phentsize=h["e_phentsize"], e_phnum=h["e_phnum"], e_shentsize=h["e_shentsize"],
        e_shnum=h["e_shnum"], e_shstrndx=h["e_shstrndx"],
    )


def _sections(elf: ELFFile) -> dict[str, Section]:
    found: dict[str, Section] = {}
    for index, sec in enumerate(elf.iter_sections()):
        h = sec.header
        name = sec.name or f"[{index}]"  # the null section, or a nameless one
        if name in found:  # duplicate names stay distinguishable
            name = f"{name}#{index}"
        nobits = h["sh_type"] == "SHT_NOBITS"
        notes = [(n["n_name"], n["n_type"], n["n_descsz"]) for n in sec.iter_notes()] \
            if h["sh_type"] == "SHT_NOTE" else []
        found[name] = Section(name, index, str(h["sh_type"]), h["sh_flags"], h["sh_addr"], h["sh_offset"],
                              h["sh_size"], h["sh_addralign"], h["sh_entsize"], h["sh_link"], h["sh_info"],
                              b"" if nobits else sec.data(), notes)
    return found


def _symbols(elf: ELFFile, by_index: dict[int, str]) -> dict[SymbolKey, Symbol]:
    found: dict[SymbolKey, Symbol] = {}
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
            found[key] = Symbol(table, sym.name, sym["st_value"], sym["st_size"], str(sym["st_info"]["type"]),
                                str(sym["st_info"]["bind"]), str(sym["st_other"]["visibility"]), where)
    return found


def _segment(header: Any) -> Segment:
    return Segment(**{key: header[key] for key in SEGMENT_FIELDS})


def parse(data: bytes) -> Parsed | str:
    """Everything the views look at, or why `data` is not a readable ELF file."""
    try:
        elf = ELFFile(io.BytesIO(data))
        sections = _sections(elf)
        parsed = Parsed(data, _header(elf), sections, [_segment(s.header) for s in elf.iter_segments()],
                        _symbols(elf, {s.index: s.name for s in sections.values()}), None, "")
    except Exception as exc:  # pyelftools raises many types on garbage input
        return f"not a readable ELF file ({type(exc).__name__}: {exc})"
    try:
        parsed.metadata = read_code_object(data).metadata
    except NotACodeObject as exc:
        parsed.problem = str(exc)
    return parsed
