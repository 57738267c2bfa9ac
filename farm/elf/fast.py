"""The facts code_object reads, taken straight from a well-formed AMDGPU ELF64 object with `struct`.

pyelftools builds its parsers anew for every file (~1.5 ms of the driver's CPU per object, most of its
acceptance). Objects the farm compiles are plain: little-endian ELF64 for EM_AMDGPU with the HSA OS/ABI,
uncompressed sections, every offset inside the file. This reader takes exactly those and gives the same
facts pyelftools gives (checked equal on every object of outputs/, tests/test_driver_cost.py); anything
else, at the first sign of it, is `Irregular`, and code_object reads that file with pyelftools as before, so
an unusual or hostile file is judged exactly as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from farm.elf.structure import (
    HEADER,
    NOTE,
    SECTION,
    SHF_COMPRESSED,
    SHT_DYNSYM,
    SHT_NOBITS,
    SHT_NOTE,
    SHT_SYMTAB,
    SYMBOL,
)

EM_AMDGPU = 224
ELFOSABI_AMDGPU_HSA = 64
STT_FUNC, STB_GLOBAL = 2, 1
NT_AMDGPU_METADATA = 32


class Irregular(ValueError):
    """Not a plain AMDGPU ELF64 object: read it the general way."""


@dataclass(frozen=True)
class Facts:
    e_flags: int
    abi_version: int
    sections: dict[str, bytes]
    kernel_symbols: list[str]
    metadata_raw: bytes | None  # the NT_AMDGPU_METADATA note's descriptor (the last one)


@dataclass(frozen=True)
class _Section:
    name: int
    type: int
    flags: int
    offset: int
    size: int
    link: int
    entsize: int


def read(data: bytes) -> Facts:
    """The object's facts, or Irregular."""
    if len(data) < HEADER.size:
        raise Irregular("short")
    (ident, _type, machine, _version, _entry, _phoff, shoff, flags, _ehsize, _phentsize, _phnum, shentsize,
     shnum, shstrndx) = HEADER.unpack_from(data)
    if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:  # ELF64, little-endian
        raise Irregular("not ELF64 LE")
    if machine != EM_AMDGPU or ident[7] != ELFOSABI_AMDGPU_HSA or shentsize != SECTION.size:
        raise Irregular("not a plain AMDGPU HSA object")
    if not 0 < shnum or shstrndx >= shnum or shoff + shnum * shentsize > len(data):
        raise Irregular("section table")
    table = [_section(data, shoff + i * shentsize) for i in range(shnum)]
    names = table[shstrndx]
    sections: dict[str, bytes] = {}
    symbols: list[str] = []
    metadata: bytes | None = None
    for sec in table:
        name = _string(data, names, sec.name)
        sections[name] = b"" if sec.type == SHT_NOBITS else data[sec.offset:sec.offset + sec.size]
        if sec.type == SHT_NOTE:
            for note_name, note_type, desc in _notes(data, sec):
                if note_name == b"AMDGPU" and note_type == NT_AMDGPU_METADATA:
                    metadata = desc
        if sec.type in (SHT_SYMTAB, SHT_DYNSYM) and name == ".symtab":
            symbols += _global_functions(data, sec, table)
    return Facts(flags, ident[8], sections, symbols, metadata)


def _section(data: bytes, at: int) -> _Section:
    name, kind, flags, _addr, offset, size, link, _info, _align, entsize = SECTION.unpack_from(data, at)
    if flags & SHF_COMPRESSED or (kind != SHT_NOBITS and offset + size > len(data)):
        raise Irregular("section data")
    return _Section(name, kind, flags, offset, size, link, entsize)


def _string(data: bytes, table: _Section, offset: int) -> str:
    """A NUL-terminated string inside a string table section (pyelftools: utf-8, errors replaced)."""
    start = table.offset + offset
    end = data.find(b"\x00", start, table.offset + table.size)
    if table.type == SHT_NOBITS or offset >= table.size or end < 0:
        raise Irregular("string")
    return data[start:end].decode("utf-8", errors="replace")


def _notes(data: bytes, sec: _Section) -> Iterator[tuple[bytes | None, int, bytes]]:
    """(name up to its NUL, type, descriptor) of each note, laid out as pyelftools reads them."""
    offset, end = sec.offset, sec.offset + sec.size
    while offset + NOTE.size < end:
        namesz, descsz, kind = NOTE.unpack_from(data, offset)
        offset += NOTE.size
        name = None
        if namesz:
            disk = (namesz + 3) & ~3
            if offset + disk > len(data):
                raise Irregular("note name")
            if b"\x00" not in data[offset:offset + disk]:
                raise Irregular("note name without its NUL")
            name = data[offset:offset + disk].split(b"\x00", 1)[0]
            offset += disk
        if offset + descsz > len(data):
            raise Irregular("note descriptor")
        yield name, kind, data[offset:offset + descsz]
        offset += (descsz + 3) & ~3


def _global_functions(data: bytes, sec: _Section, table: list[_Section]) -> list[str]:
    if sec.entsize != SYMBOL.size or sec.link >= len(table):
        raise Irregular("symbol table")
    strings = table[sec.link]
    out = []
    for at in range(sec.offset, sec.offset + sec.size // SYMBOL.size * SYMBOL.size, SYMBOL.size):
        name, info, _other, _shndx, _value, _size = SYMBOL.unpack_from(data, at)
        if info & 0xF == STT_FUNC and info >> 4 == STB_GLOBAL:
            out.append(_string(data, strings, name))
    return out
