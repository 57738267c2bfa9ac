"""Any ELF file, read whole with pyelftools into plain values: header, sections (their notes too), segments,
symbols. The general reader: code_object reads an object through it when the fast path declines one,
`farm diff` compares two images view by view, `farm emulate` finds a kernel's code and descriptor in one.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, NamedTuple

from elftools.elf.elffile import ELFFile
from elftools.elf.enums import ENUM_E_MACHINE, ENUM_E_TYPE, ENUM_E_VERSION, ENUM_EI_OSABI

SEGMENT_FIELDS = ("p_type", "p_flags", "p_offset", "p_vaddr", "p_paddr", "p_filesz", "p_memsz", "p_align")
SYMBOL_TABLES = (".symtab", ".dynsym")


class Unreadable(ValueError):
    """pyelftools could not read the file: '<exception type>: <message>'."""


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


class Note(NamedTuple):
    name: str
    type: Any  # a number, or pyelftools' name for it
    descsz: int
    desc: bytes


@dataclass(frozen=True)
class Section:
    index: int
    name: str  # as the file names it ("" for the null section; names may repeat)
    type: str
    flags: int
    addr: int
    offset: int
    size: int
    align: int
    entsize: int
    link: int
    info: int
    data: bytes  # b"" for SHT_NOBITS
    notes: tuple[Note, ...]  # of an SHT_NOTE section


@dataclass(frozen=True)
class Symbol:
    table: str  # .symtab or .dynsym
    name: str
    value: int
    size: int
    type: str
    bind: str
    visibility: str
    shndx: int | str  # the section index, or pyelftools' name of a special one (SHN_ABS)


@dataclass(frozen=True)
class Image:
    header: Header
    sections: tuple[Section, ...]  # in table order
    segments: tuple[Segment, ...]
    symbols: tuple[Symbol, ...]  # of the first section named .symtab, then of the first named .dynsym

    def section(self, name: str) -> Section | None:
        """The first section of that name."""
        return next((s for s in self.sections if s.name == name), None)


def read(data: bytes) -> Image:
    """The whole file, or Unreadable."""
    try:
        elf = ELFFile(io.BytesIO(data))
        return Image(_header(elf), tuple(_section(i, s) for i, s in enumerate(elf.iter_sections())),
                     tuple(_segment(s.header) for s in elf.iter_segments()), tuple(_symbols(elf)))
    except Exception as exc:  # noqa: BLE001  pyelftools raises many types on garbage input
        raise Unreadable(f"{type(exc).__name__}: {exc}") from None


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


def _section(index: int, sec: Any) -> Section:
    h = sec.header
    notes = tuple(_note(n) for n in sec.iter_notes()) if h["sh_type"] == "SHT_NOTE" else ()
    return Section(index, sec.name, str(h["sh_type"]), h["sh_flags"], h["sh_addr"], h["sh_offset"], h["sh_size"],
                   h["sh_addralign"], h["sh_entsize"], h["sh_link"], h["sh_info"],
                   b"" if h["sh_type"] == "SHT_NOBITS" else sec.data(), notes)


def _note(note: Any) -> Note:
    desc = note["n_descdata"]
    return Note(note["n_name"], note["n_type"], note["n_descsz"],
                desc if isinstance(desc, bytes) else desc.encode("latin-1"))


def _segment(header: Any) -> Segment:
    return Segment(**{key: header[key] for key in SEGMENT_FIELDS})


def _symbols(elf: ELFFile) -> list[Symbol]:
    found: list[Symbol] = []
    for table in SYMBOL_TABLES:
        sec = elf.get_section_by_name(table)
        if hasattr(sec, "iter_symbols"):  # a symbol table section (SymbolTableSection and its kin)
            found += [Symbol(table, sym.name, sym["st_value"], sym["st_size"], str(sym["st_info"]["type"]),
                             str(sym["st_info"]["bind"]), str(sym["st_other"]["visibility"]), sym["st_shndx"])
                      for sym in sec.iter_symbols()]
    return found
