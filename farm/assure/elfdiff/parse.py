"""Parsing: everything the views compare, read once (farm/elf/image.py) into plain values keyed for comparing."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from farm.elf import image
from farm.elf.code_object import NotACodeObject, read_code_object
from farm.elf.image import Header, Segment

# The code object's msgpack metadata as decoded from the file: data to compare, never trusted to have a shape.
Metadata = dict[str, Any]


# A section as farm/elf/image.py reads it, its `name` the key it has in `Parsed.sections` (a nameless or repeated
# name made distinguishable: "[0]", ".text#7").
Section = image.Section


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


def _sections(elf: image.Image) -> dict[str, Section]:
    found: dict[str, Section] = {}
    for sec in elf.sections:
        name = sec.name or f"[{sec.index}]"  # the null section, or a nameless one
        if name in found:  # duplicate names stay distinguishable
            name = f"{name}#{sec.index}"
        found[name] = replace(sec, name=name)
    return found


def _symbols(elf: image.Image, by_index: dict[int, str]) -> dict[SymbolKey, Symbol]:
    found: dict[SymbolKey, Symbol] = {}
    for sym in elf.symbols:
        shndx = sym.shndx
        where = by_index.get(shndx, str(shndx)) if isinstance(shndx, int) else str(shndx)
        key = (sym.table, sym.name, 0)
        while key in found:  # repeated names (locals): keep each, in table order
            key = (sym.table, sym.name, key[2] + 1)
        found[key] = Symbol(sym.table, sym.name, sym.value, sym.size, sym.type, sym.bind, sym.visibility, where)
    return found


def parse(data: bytes) -> Parsed | str:
    """Everything the views look at, or why `data` is not a readable ELF file."""
    try:
        elf = image.read(data)
    except image.Unreadable as exc:
        return f"not a readable ELF file ({exc})"
    sections = _sections(elf)
    parsed = Parsed(data, elf.header, sections, list(elf.segments),
                    _symbols(elf, {s.index: s.name for s in sections.values()}), None, "")
    try:
        parsed.metadata = read_code_object(data).metadata
    except NotACodeObject as exc:
        parsed.problem = str(exc)
    return parsed
