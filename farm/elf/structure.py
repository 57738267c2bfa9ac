"""Is a file's ELF structure sound enough to hand to an external tool? One reason when it is not.

`llvm-objdump` trusts the headers it reads: one section header saying `sh_size = 2**63` made it print the
same warning without end (issue 37). Every object the farm disassembles passes this check first, and a
file that fails it never reaches the tool: its header and tables must lie inside the file, every section's
data too, every name inside its string table, every symbol and relocation inside its tables and sections.

The objects the farm makes are plain 64-bit little-endian ELF (farm/elf/fast.py, which reads them with
the layouts defined here); anything else is refused here too, which is no loss: such a file is not one of
the farm's objects. Read with `struct`, not pyelftools, because it runs on every row a build verifies
(pyelftools builds its parsers anew for each file, ~1.5 ms of the driver's CPU; this takes ~70 us).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# Far above any object the farm makes (the largest of the table is ~23 kB): a bound on what a tool is given,
# and so on how much it can print (disasm.py scales its output limit with the input).
MAX_OBJECT_BYTES = 16 << 20
# ELF64 little-endian: the file header, a section header, a symbol, a note's header.
HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
SECTION = struct.Struct("<IIQQQQIIQQ")
SYMBOL = struct.Struct("<IBBHQQ")
NOTE = struct.Struct("<III")
SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_HASH, SHT_DYNAMIC, SHT_NOTE, SHT_NOBITS, SHT_REL, SHT_DYNSYM = (
    2, 3, 4, 5, 6, 7, 8, 9, 11)
SHT_GNU_HASH = 0x6FFFFFF6
SHF_COMPRESSED = 0x800
SHN_ABS, SHN_COMMON, SHN_XINDEX = 0xFFF1, 0xFFF2, 0xFFFF
PN_XNUM = 0xFFFF
_PROGRAM_HEADER_SIZE = 56
_DYNAMIC_ENTRY_SIZE = 16
_RELOCATION_SIZE = {SHT_REL: 16, SHT_RELA: 24}
_SYMBOL_KINDS = (SHT_SYMTAB, SHT_DYNSYM)


class Malformed(ValueError):
    """What is wrong with the file's structure (the message)."""


@dataclass(frozen=True)
class _Section:
    index: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    entsize: int

    def __str__(self) -> str:
        return f"section {self.index} ({self.name or 'no name'})"


def problem(data: bytes) -> str | None:
    """Why `data` must not be handed to a tool, or None when its structure is sound."""
    try:
        _check(data)
    except Malformed as exc:
        return str(exc)
    return None


def _check(data: bytes) -> None:
    size = len(data)
    if size > MAX_OBJECT_BYTES:
        raise Malformed(f"{size} bytes, more than any code object ({MAX_OBJECT_BYTES} bytes at most)")
    if data[:4] != b"\x7fELF":
        raise Malformed("not an ELF file (no ELF magic number)")
    if size < HEADER.size:
        raise Malformed(f"{size} bytes, shorter than an ELF64 header ({HEADER.size} bytes)")
    (ident, _type, _machine, _version, _entry, phoff, shoff, _flags, _ehsize, phentsize, phnum, shentsize,
     shnum, shstrndx) = HEADER.unpack_from(data)
    if ident[4] != 2 or ident[5] != 1:
        raise Malformed(f"not 64-bit little-endian ELF (EI_CLASS {ident[4]}, EI_DATA {ident[5]})")
    _check_segments(data, phoff, phentsize, phnum)
    if shnum == 0 or shentsize != SECTION.size:
        raise Malformed(f"section header table: e_shnum {shnum}, e_shentsize {shentsize} "
                        f"(the farm's objects have sections of {SECTION.size} bytes)")
    _inside(data, shoff, shnum * shentsize, f"section header table ({shnum} headers at offset {shoff})")
    if not 0 < shstrndx < shnum:
        raise Malformed(f"e_shstrndx {shstrndx} is not a section (e_shnum {shnum})")
    raw = [SECTION.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    names = raw[shstrndx]
    if names[1] != SHT_STRTAB:
        raise Malformed(f"e_shstrndx {shstrndx} names a section of type {names[1]}, not a string table")
    _inside(data, names[4], names[5], f"section {shstrndx} (the section name table)")
    table = [_section(data, i, fields, names[4], names[5]) for i, fields in enumerate(raw)]
    for sec in table:  # every section's place first: the checks by type read the sections they link to
        _check_place(data, sec, len(table))
    for sec in table:
        _check_contents(data, sec, table)


def _check_segments(data: bytes, phoff: int, phentsize: int, phnum: int) -> None:
    if phnum == 0:
        return
    if phnum == PN_XNUM or phentsize != _PROGRAM_HEADER_SIZE:
        raise Malformed(f"program header table: e_phnum {phnum}, e_phentsize {phentsize}")
    _inside(data, phoff, phnum * phentsize, f"program header table ({phnum} headers at offset {phoff})")
    for i in range(phnum):
        at = phoff + i * phentsize
        offset = int.from_bytes(data[at + 8:at + 16], "little")
        filesz = int.from_bytes(data[at + 32:at + 40], "little")
        _inside(data, offset, filesz, f"segment {i}")


def _section(data: bytes, index: int, fields: tuple[int, ...], names_at: int, names_size: int) -> _Section:
    name_at, kind, flags, addr, offset, size, link, _info, _align, entsize = fields
    name = _string(data, names_at, names_size, name_at, f"section {index}'s name")
    return _Section(index, name, kind, flags, addr, offset, size, link, entsize)


def _check_place(data: bytes, sec: _Section, count: int) -> None:
    if sec.type != SHT_NOBITS:
        _inside(data, sec.offset, sec.size, str(sec))
    if sec.flags & SHF_COMPRESSED:
        raise Malformed(f"{sec} is compressed (the farm's objects never are)")
    if sec.link >= count:
        raise Malformed(f"{sec}: sh_link {sec.link} is not a section (e_shnum {count})")


def _check_contents(data: bytes, sec: _Section, table: list[_Section]) -> None:
    if sec.type in _SYMBOL_KINDS:
        _check_symbols(data, sec, table)
    elif sec.type in _RELOCATION_SIZE:
        _check_relocations(data, sec, table)
    elif sec.type == SHT_NOTE:
        _check_notes(data, sec)
    elif sec.type == SHT_DYNAMIC:
        _entries(sec, _DYNAMIC_ENTRY_SIZE)
    elif sec.type == SHT_HASH:
        _check_hash(data, sec)
    elif sec.type == SHT_GNU_HASH:
        _check_gnu_hash(data, sec)


def _entries(sec: _Section, entsize: int) -> int:
    """How many fixed-size entries the section holds; Malformed unless that size divides it exactly."""
    if sec.entsize != entsize or sec.size % entsize:
        raise Malformed(f"{sec}: sh_size {sec.size} is not a whole number of {entsize}-byte entries "
                        f"(sh_entsize {sec.entsize})")
    return sec.size // entsize


def _check_symbols(data: bytes, sec: _Section, table: list[_Section]) -> None:
    count = _entries(sec, SYMBOL.size)
    strings = table[sec.link]
    if strings.type != SHT_STRTAB:
        raise Malformed(f"{sec}: sh_link {sec.link} is not a string table")
    for i in range(count):
        name_at, _info, _other, shndx, value, size = SYMBOL.unpack_from(data, sec.offset + i * SYMBOL.size)
        what = f"{sec}, symbol {i}"
        _string(data, strings.offset, strings.size, name_at, f"{what}'s name")
        if shndx in (0, SHN_ABS, SHN_COMMON):
            continue
        if shndx >= len(table):
            raise Malformed(f"{what}: st_shndx {shndx} is not a section (e_shnum {len(table)})")
        home = table[shndx]
        if not (home.addr <= value and value + size <= home.addr + home.size):
            raise Malformed(f"{what}: [{value:#x}, {value + size:#x}) lies outside {home} "
                            f"[{home.addr:#x}, {home.addr + home.size:#x})")


def _check_relocations(data: bytes, sec: _Section, table: list[_Section]) -> None:
    count = _entries(sec, _RELOCATION_SIZE[sec.type])
    symbols = table[sec.link]
    if symbols.type not in _SYMBOL_KINDS:
        raise Malformed(f"{sec}: sh_link {sec.link} is not a symbol table")
    known = symbols.size // SYMBOL.size
    for i in range(count):
        at = sec.offset + i * sec.entsize + 8  # r_offset, then r_info (symbol index in its high half)
        symbol = int.from_bytes(data[at:at + 8], "little") >> 32
        if symbol >= known:
            raise Malformed(f"{sec}, relocation {i}: symbol {symbol} is not in {symbols} ({known} symbols)")


def _check_notes(data: bytes, sec: _Section) -> None:
    """Each note's name and descriptor (4-byte aligned, as AMDGPU notes are) inside the section."""
    offset, end = sec.offset, sec.offset + sec.size
    while offset + NOTE.size <= end:
        namesz, descsz, _kind = NOTE.unpack_from(data, offset)
        following = offset + NOTE.size + _aligned(namesz) + _aligned(descsz)
        if following > end:
            raise Malformed(f"{sec}: the note at offset {offset} (name {namesz} bytes, descriptor {descsz} "
                            f"bytes) runs past the section's end at {end}")
        offset = following


def _aligned(size: int) -> int:
    return (size + 3) & ~3


def _check_hash(data: bytes, sec: _Section) -> None:
    if sec.size < 8:
        raise Malformed(f"{sec}: {sec.size} bytes, too short for a hash table's header")
    buckets = int.from_bytes(data[sec.offset:sec.offset + 4], "little")
    chains = int.from_bytes(data[sec.offset + 4:sec.offset + 8], "little")
    if 8 + 4 * (buckets + chains) > sec.size:
        raise Malformed(f"{sec}: {buckets} buckets and {chains} chains do not fit in its {sec.size} bytes")


def _check_gnu_hash(data: bytes, sec: _Section) -> None:
    if sec.size < 16:
        raise Malformed(f"{sec}: {sec.size} bytes, too short for a GNU hash table's header")
    buckets = int.from_bytes(data[sec.offset:sec.offset + 4], "little")
    bloom = int.from_bytes(data[sec.offset + 8:sec.offset + 12], "little")
    if 16 + 8 * bloom + 4 * buckets > sec.size:
        raise Malformed(f"{sec}: {bloom} bloom words and {buckets} buckets do not fit in its {sec.size} bytes")


def _inside(data: bytes, offset: int, size: int, what: str) -> None:
    if offset + size > len(data):
        raise Malformed(f"{what} runs past the end of the file: offset {offset} + size {size} > "
                        f"{len(data)} bytes")


def _string(data: bytes, table_at: int, table_size: int, offset: int, what: str) -> str:
    """The NUL-terminated string at `offset` in a string table (already known to lie inside the file)."""
    if offset >= table_size:
        raise Malformed(f"{what} is at offset {offset} of a {table_size}-byte string table")
    end = data.find(b"\x00", table_at + offset, table_at + table_size)
    if end < 0:
        raise Malformed(f"{what} at offset {offset} has no terminating NUL inside its string table")
    return data[table_at + offset:end].decode("utf-8", "replace")
